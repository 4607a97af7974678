"""The test suite (a package, so that its folders mirror the package and share ``tests.helpers``)."""
