"""lovecraft_convert: stream datasets larger than RAM into training-ready files.

The public API is imported lazily so that ``lovecraft --help`` stays instant.
"""

from __future__ import annotations

__version__ = "0.1.0"

_API = {
    "convert": "lovecraft_convert.pipeline:convert",
    "ConvertOptions": "lovecraft_convert.pipeline:ConvertOptions",
    "shard": "lovecraft_convert.sharding:shard",
    "ShardOptions": "lovecraft_convert.sharding:ShardOptions",
    "bucket": "lovecraft_convert.bucketer:bucket",
    "BucketOptions": "lovecraft_convert.bucketer:BucketOptions",
    "LovecraftError": "lovecraft_convert.errors:LovecraftError",
    "open_dataset": "lovecraft_convert.loaders:open_dataset",
    "inspect": "lovecraft_convert.inspect:inspect",
    "verify": "lovecraft_convert.verify:verify",
}

__all__ = ["__version__", *_API]


def __getattr__(name: str):
    if name in _API:
        import importlib

        module, _, attr = _API[name].partition(":")
        return getattr(importlib.import_module(module), attr)
    raise AttributeError(f"module 'lovecraft_convert' has no attribute {name!r}")
