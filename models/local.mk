MODELS = %D%/mnist.net %D%/mnist-adam.net %D%/mlp.net %D%/lenet5.net %D%/resnet.net %D%/large.net %D%/siamese.net \
	%D%/charlm.net %D%/fashion-resnet.net
EXTRA_DIST += $(MODELS)
