"""The SSQ twin file: format constants and blocks, Q8_0 quantisation, writer, reader."""

from .read import SSQFile

__all__ = ["SSQFile"]
