"""lovecraft_convert: stream datasets larger than RAM into training-ready files.

The public API is imported lazily so that ``lovecraft --help`` stays instant.
"""

from __future__ import annotations

from .version import __version__

_API = {
    "convert": "lovecraft_convert.jobs.convert:convert",
    "ConvertOptions": "lovecraft_convert.jobs.options:ConvertOptions",
    "shard": "lovecraft_convert.jobs.shard:shard",
    "ShardOptions": "lovecraft_convert.jobs.options:ShardOptions",
    "bucket": "lovecraft_convert.jobs.bucket:bucket",
    "BucketOptions": "lovecraft_convert.jobs.options:BucketOptions",
    "LovecraftError": "lovecraft_convert.errors:LovecraftError",
    "OptionsError": "lovecraft_convert.errors:OptionsError",
    "InputError": "lovecraft_convert.errors:InputError",
    "SchemaError": "lovecraft_convert.errors:SchemaError",
    "OutputError": "lovecraft_convert.errors:OutputError",
    "DatasetError": "lovecraft_convert.errors:DatasetError",
    "DependencyError": "lovecraft_convert.errors:DependencyError",
    "OverflowErrorF16": "lovecraft_convert.errors:OverflowErrorF16",
    "Interrupted": "lovecraft_convert.errors:Interrupted",
    "SlowReadWarning": "lovecraft_convert.errors:SlowReadWarning",
    "StorageError": "lovecraft_convert.storage.base:StorageError",
    "CacheError": "lovecraft_convert.storage.cache:CacheError",
    "Manifest": "lovecraft_convert.result:Manifest",
    "FileEntry": "lovecraft_convert.result:FileEntry",
    "open_dataset": "lovecraft_convert.loaders:open_dataset",
    "inspect": "lovecraft_convert.inspection:inspect",
    "verify": "lovecraft_convert.verification:verify",
    "register_format": "lovecraft_convert.formats:register",
    "OutputFormat": "lovecraft_convert.formats.base:OutputFormat",
}

__all__ = ["__version__", *_API]


def __getattr__(name: str):
    if name in _API:
        import importlib

        module, _, attr = _API[name].partition(":")
        return getattr(importlib.import_module(module), attr)
    raise AttributeError(f"module 'lovecraft_convert' has no attribute {name!r}")


def __dir__() -> list[str]:
    """The lazily imported API too (``dir()``, editors and ``help()`` list ``open_dataset``)."""
    return sorted({*globals(), *_API})
