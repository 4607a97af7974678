"""Scripts of the checkout (benchmarks) as modules, for tests of their plumbing."""
import importlib.util
import sys

from tests.helpers.paths import ROOT


def load_script(path: str):
    """The script at ``path`` (relative to the checkout, e.g. ``benchmarks/device/rerank_device.py``) as a module,
    loaded once by its file path under its file name, as the scripts import one another."""
    name = path.rsplit("/", 1)[-1].removesuffix(".py")
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, ROOT / path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            del sys.modules[name]
            raise
    return sys.modules[name]
