"""What the server runs in a kernel whose environment lacks this version of the agent.

It is never imported in the kernel: the server sends this file's text in the metadata of one
silent execute_request (``BOOT_CODE``, in ``protocol.py``) and the kernel ``exec``s it in a
namespace of its own, so the user's namespace and history gain nothing. The same request
carries the bundle (``server/kernels/bundle.py``): this version's kernel-side modules and the
pure-Python libraries they need (cloudpickle), as ``{module name: [is_package, source]}``.

``bring`` puts a finder in front of ``sys.meta_path`` that answers ``jupyter_gpu_pause`` and
its modules from the bundle, for this process only: nothing is written to the kernel's
environment, and the libraries it needs live under ``jupyter_gpu_pause._brought``, so the
user's own packages are neither shadowed nor upgraded. A copy of another version of
jupyter_gpu_pause the environment has is set aside (its loaded modules dropped): the server's
agent is the one that runs.

It runs before anything is known of the kernel's Python, so it uses nothing newer than 3.7's
syntax (ruff holds it to that); an older Python fails to parse it, which the server reports as
``python-too-old``, as this text does for 3.7 and 3.8. A kernel it cannot serve gets a reason
the server turns into ``pausable: false`` (``python-too-old``, ``agent-refused``).
"""

MIN_PYTHON = (3, 9)
NAME = "_jupyter_gpu_pause_bring"  # the ``__name__`` BOOT_CODE execs this under


def bring():
    import sys

    from IPython import get_ipython  # an ImportError here: not an IPython kernel

    # the request key is the exec's: this text names nothing of the package's
    request = get_ipython().kernel.get_parent()["metadata"][globals()["KEY"]]
    params = request["params"]

    def reply(body):
        from IPython.display import publish_display_data

        body.update({"protocol": params["protocol"], "version": params["version"]})
        publish_display_data({params["mime"]: body})

    def fail(message, reason):
        reply({"ok": False, "error": {"message": message, "reason": reason, "check": None}})

    if sys.version_info < MIN_PYTHON:
        return fail(
            f"this kernel runs Python {sys.version.split()[0]}; jupyter_gpu_pause's agent "
            f"needs Python {MIN_PYTHON[0]}.{MIN_PYTHON[1]} or newer",
            "python-too-old",
        )
    import base64
    import importlib.abc
    import importlib.util
    import json
    import marshal
    import os
    import zlib

    magic = importlib.util.MAGIC_NUMBER.hex()  # this Python's bytecode: compiled bundles
    if "compiled" in params:  # {name: [is_package, None, code]}: the server's Python is ours
        if params.get("magic") != magic:
            return fail("the bundle was compiled for another Python", "bundle-python")
        files = marshal.loads(zlib.decompress(base64.b64decode(params["compiled"])))
    else:  # {name: [is_package, source]}
        raw = zlib.decompress(base64.b64decode(params["bundle"])).decode("utf-8")
        files = json.loads(raw)
    version = params["version"]
    where = f"<jupyter_gpu_pause {version}, brought by the server>"

    class Brought(importlib.abc.MetaPathFinder, importlib.abc.InspectLoader):
        """The bundle's modules, run from their code (compiled by the server for this very
        Python) or compiled from their source, as they are imported."""

        jupyter_gpu_pause_brought = version

        def find_spec(self, fullname, path=None, target=None):
            if fullname not in files:
                return None
            origin = "{}/{}.py".format(where, fullname.replace(".", "/"))
            return importlib.util.spec_from_loader(
                fullname, self, origin=origin, is_package=self.is_package(fullname)
            )

        def create_module(self, spec):
            return None

        def exec_module(self, module):
            name = module.__name__
            module.__file__ = module.__spec__.origin
            if self.is_package(name):
                module.__path__ = []
            exec(self.get_code(name), module.__dict__)

        def is_package(self, fullname):
            return bool(files[fullname][0])

        def get_source(self, fullname):  # tracebacks show our lines (linecache asks this)
            return files[fullname][1]

        def get_code(self, fullname):
            entry = files[fullname]
            if len(entry) > 2:
                return entry[2]
            origin = "{}/{}.py".format(where, fullname.replace(".", "/"))
            return compile(entry[1], origin, "exec", dont_inherit=True)

    # another version of ours, loaded or installed: set aside, ours answers from now on
    for name in [
        n for n in sys.modules if n == "jupyter_gpu_pause" or n.startswith("jupyter_gpu_pause.")
    ]:
        del sys.modules[name]
    sys.meta_path[:] = [f for f in sys.meta_path if not hasattr(f, "jupyter_gpu_pause_brought")]
    sys.meta_path.insert(0, Brought())
    importlib.import_module("jupyter_gpu_pause.kernel.agent")
    probe = params.get("spool_probe")
    sees = False
    if probe:
        try:
            with open(probe["path"]) as f:
                sees = f.read() == probe["token"] and os.access(
                    os.path.dirname(probe["path"]), os.W_OK
                )
        except OSError:
            sees = False
    reply({"ok": True, "result": {"modules": len(files), "sees_spool": sees, "magic": magic}})


if __name__ == NAME:
    bring()
