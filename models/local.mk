MODELS = %D%/mnist.net %D%/mnist-adam.net %D%/mlp.net %D%/lenet5.net %D%/resnet.net %D%/large.net %D%/siamese.net \
	%D%/charlm.net %D%/fashion-resnet.net
# Installed in $(pkgdatadir)/models, beside $(pkgdatadir)/data: `graphc run mnist` finds
# them there, and their mnist("../data/mnist") the installed MNIST.
modelsdir = $(pkgdatadir)/models
dist_models_DATA = $(MODELS)
