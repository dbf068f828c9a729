"""Install-time build of pld's kernels ahead of time (everything else: pyproject.toml).

``build_ext`` compiles the numba kernels of ``kernels/`` into one extension module for
this machine (``pld/kernels/pld_kernels_aot.*.so`` and its sidecar ``.json``; see
``kernels/_aot.py``), so that the first ``pld`` run after installing loads them instead of
JIT-compiling them (seconds of CPU).  The build runs in a subprocess that imports only
``kernels/`` (numpy and numba: the build requirements), never the rest of pld.  It is
optional: without a C compiler or ``numba.pycc``, or with ``PLD_BUILD_KERNELS=0``, the
install goes on without it and the kernels JIT-compile on first use, as before.
"""

import os
import re
import subprocess
import sys
import warnings

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))

#: run in a fresh interpreter: ``kernels/`` imported as ``pld.kernels`` under an empty
#: ``pld`` (the real package's import would need scipy), then built into argv[2]
_BUILD = r"""
import importlib.util, os, sys, types
kernels = os.path.join(sys.argv[1], "kernels")
pld = types.ModuleType("pld")
pld.__path__ = []
sys.modules["pld"] = pld
spec = importlib.util.spec_from_file_location("pld.kernels", os.path.join(kernels, "__init__.py"),
                                              submodule_search_locations=[kernels])
module = importlib.util.module_from_spec(spec)
sys.modules["pld.kernels"] = module
spec.loader.exec_module(module)
from pld.kernels import _aot
_aot.build_packaged(sys.argv[2])
"""


class KernelsExtension(Extension):
    """The kernels' extension module, built by numba.pycc (no C sources of its own)."""

    def __init__(self, name):
        super().__init__(name, sources=[])


class BuildExt(build_ext):
    def build_extensions(self):
        kept = []
        for ext in self.extensions:
            if not isinstance(ext, KernelsExtension):
                self.build_extension(ext)
                kept.append(ext)
            elif self._build_kernels(ext):
                kept.append(ext)
        self.extensions[:] = kept  # (a skipped module is neither copied nor listed as an output)

    def _build_kernels(self, ext) -> bool:
        if os.environ.get("PLD_BUILD_KERNELS", "").strip().lower() in ("0", "off", "no"):
            return False
        target = self.get_ext_fullpath(ext.name)
        sidecar = os.path.join(os.path.dirname(target), "pld_kernels_aot.json")
        env = dict(os.environ, PLD_KERNELS_AOT="off")  # (load nothing built before)
        env.pop("NUMBA_CACHE_DIR", None)
        print("building pld's kernels ahead of time with numba.pycc (about 10-20 s of CPU)", flush=True)
        try:
            out = subprocess.run([sys.executable, "-c", _BUILD, HERE, target], env=env, capture_output=True,
                                 text=True, timeout=1800)
        except (OSError, subprocess.SubprocessError) as exc:
            out = None
            why = f"{type(exc).__name__}: {exc}"
        if out is not None and out.returncode == 0 and os.path.exists(target) and os.path.exists(sidecar):
            return True
        if out is not None:
            lines = out.stderr.strip().splitlines() or [f"exit status {out.returncode}"]
            errors = [line for line in lines if re.match(r"^[\w.]*(Error|Exception)\b", line)]
            why = (errors or lines)[-1]
        warnings.warn(f"pld: the kernels were not built ahead of time ({why}); they will be JIT-compiled on "
                      "first use (`pld warm` builds them later)", stacklevel=1)
        for path in (target, sidecar):
            if os.path.exists(path):
                os.remove(path)
        return False

    def copy_extensions_to_source(self):
        # (editable installs) build_ext copies the module into the source tree, not its sidecar
        super().copy_extensions_to_source()
        build_py = self.get_finalized_command("build_py")
        for ext in self.extensions:
            if isinstance(ext, KernelsExtension):
                module = os.path.join(self.build_lib, self.get_ext_filename(ext.name))
                built = os.path.join(os.path.dirname(module), "pld_kernels_aot.json")
                package = ".".join(ext.name.split(".")[:-1])
                self.copy_file(built, os.path.join(build_py.get_package_dir(package), os.path.basename(built)),
                               level=self.verbose)

setup(ext_modules=[KernelsExtension("pld.kernels.pld_kernels_aot")], cmdclass={"build_ext": BuildExt})
