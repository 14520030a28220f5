# graph
