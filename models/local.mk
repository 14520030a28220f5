# models
