"""sealift: carry a complete LLM serving stack into an air-gapped Kubernetes cluster."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("sealift")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0+unknown"
