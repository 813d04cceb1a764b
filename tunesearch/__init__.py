"""tunesearch: a lazy tensor library that fuses models into kernels, tunes every kernel with a real
search engine, and stores the winners in a database that the runtime reads by itself."""
from tunesearch.tensor import Tensor, ShapeError
from tunesearch.tensor.traced import traced
from tunesearch.graph.dtypes import dtypes

__version__ = "0.1.0"
__all__ = ["Tensor", "ShapeError", "dtypes", "traced", "__version__"]
