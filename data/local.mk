# The real MNIST ships with graphc (see data/mnist/README.md for source and license),
# and is installed in $(pkgdatadir)/data/mnist for the installed models.
mnistdir = $(pkgdatadir)/data/mnist
dist_mnist_DATA = %D%/mnist/README.md %D%/mnist/train-images-idx3-ubyte.gz \
	%D%/mnist/train-labels-idx1-ubyte.gz %D%/mnist/t10k-images-idx3-ubyte.gz \
	%D%/mnist/t10k-labels-idx1-ubyte.gz
