# parser
