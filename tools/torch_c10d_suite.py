"""PyTorch's own c10d tests for the Gloo backend, run against chorus beside gloo.

PyTorch checks ProcessGroupGloo with test/distributed/test_c10d_gloo.py and the backend-independent
cases of test/distributed/test_c10d_common.py. They are not in the wheel: this driver takes the path
of a PyTorch source checkout of the installed version (fetched by whoever runs it, never part of
this project), imports the test files from it and runs them with every assertion as it is. With
`run chorus` the process groups those tests make for gloo are chorus's: the backend name "gloo"
given to init_process_group, new_group and the rest names chorus (torch.distributed's Backend
maps it), and the file's helper that builds a ProcessGroupGloo directly builds a chorus group
through chorus_torch. With `run gloo` nothing is changed: the control.

    git clone --depth 1 --branch v2.11.0 https://github.com/pytorch/pytorch /tmp/pytorch
    PYTHONPATH=build/python .torch-venv/bin/python tools/torch_c10d_suite.py run gloo /tmp/pytorch gloo.json
    PYTHONPATH=build/python .torch-venv/bin/python tools/torch_c10d_suite.py run chorus /tmp/pytorch chorus.json
    .torch-venv/bin/python tools/torch_dist_suite.py compare gloo.json chorus.json

`run` options: --file NAME (a file of test/distributed to run, repeatable; default test_c10d_gloo.py
and test_c10d_common.py), -k SUBSTRING (only tests whose class.name holds it, repeatable), --timeout
S (per test, default 120). Each test's outcome goes to the JSON file, named module.class.test; `compare`
(tools/torch_dist_suite.py's) lists every test the first passed and the second did not.
"""
import argparse
import datetime
import importlib
import json
import os
import sys
import time
import unittest

DEFAULT_FILES = ["test_c10d_gloo.py", "test_c10d_common.py"]


def _chorus_group(test, store, rank, world_size, opts):
    """What the gloo file's _create_process_group_gloo builds, as a chorus group (its timeout kept)."""
    import chorus_torch

    timeout = getattr(opts, "_timeout", None) or datetime.timedelta(seconds=300)
    return chorus_torch._C._create_process_group(store, test.rank, test.world_size, timeout)


def _modules():
    """The test files' modules, imported from the checkout (and patched for chorus)."""
    folder = os.environ["TORCH_C10D_SUITE_DIR"]
    if folder not in sys.path:
        sys.path.insert(0, folder)
    chorus = os.environ["TORCH_C10D_SUITE_BACKEND"] == "chorus"
    if chorus:
        from torch_dist_suite import gloo_means_chorus

        gloo_means_chorus()
    modules = []
    for name in os.environ["TORCH_C10D_SUITE_FILES"].split(","):
        module = importlib.import_module(name[:-3] if name.endswith(".py") else name)
        if chorus:
            for value in vars(module).values():
                if isinstance(value, type) and "_create_process_group_gloo" in vars(value):
                    value._create_process_group_gloo = _chorus_group
        modules.append(module)
    return modules


# Spawned ranks import this module again (as __mp_main__), with the parent's environment: they need
# the same patches before they unpickle their test.
if __name__ == "__mp_main__" and "TORCH_C10D_SUITE_BACKEND" in os.environ:
    _modules()


def run(args):
    from torch_dist_suite import _counts, _Outcomes

    folder = os.path.join(os.path.abspath(args.pytorch), "test", "distributed")
    files = args.file or DEFAULT_FILES
    for f in files:
        if not os.path.isfile(os.path.join(folder, f)):
            sys.exit(f"torch_c10d_suite: {os.path.join(folder, f)} is not there: give the path of a PyTorch "
                     "source checkout of the installed torch's version (git clone --branch vX.Y.Z ...)")
    os.environ["TORCH_C10D_SUITE_BACKEND"] = args.backend
    os.environ["TORCH_C10D_SUITE_DIR"] = folder
    os.environ["TORCH_C10D_SUITE_FILES"] = ",".join(files)
    os.environ["DISTRIBUTED_TESTS_DEFAULT_TIMEOUT"] = str(args.timeout)
    import torch

    loader = unittest.TestLoader()
    suite = unittest.TestSuite()
    seen = set()
    for module in _modules():
        for value in vars(module).values():
            # A class the file imports from another (test_c10d_common's in test_c10d_gloo) runs once,
            # as the file that defines it.
            if not (isinstance(value, type) and issubclass(value, unittest.TestCase)) or value in seen:
                continue
            if value.__module__ != module.__name__:
                continue
            seen.add(value)
            for name in loader.getTestCaseNames(value):
                qualified = f"{value.__name__}.{name}"
                if not args.k or any(k in qualified for k in args.k):
                    suite.addTest(value(name))
    start = time.monotonic()

    class Qualified(_Outcomes):
        name_parts = 3  # module.class.test: both files have a CommTest and a TimeoutTest

    runner = unittest.TextTestRunner(verbosity=2, resultclass=Qualified, stream=sys.stderr)
    result = runner.run(suite)
    counts = _counts(result.outcomes)
    record = {"backend": args.backend, "files": files, "world_size": "the files' own", "torch": torch.__version__,
              "seconds": round(time.monotonic() - start, 1), "counts": counts, "tests": result.outcomes}
    with open(args.out, "w") as f:
        json.dump(record, f, indent=1, sort_keys=True)
    print(f"{args.backend} on {', '.join(files)}, torch {torch.__version__}: {counts['passed']} passed, "
          f"{counts['failed']} failed, {counts['error']} errors, {counts['skipped']} skipped "
          f"in {record['seconds']} s -> {args.out}")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("command", choices=["run"])
    p.add_argument("backend", choices=["chorus", "gloo"])
    p.add_argument("pytorch", help="a PyTorch source checkout of the installed version")
    p.add_argument("out")
    p.add_argument("--file", action="append", help="a file of test/distributed (repeatable)")
    p.add_argument("-k", action="append", help="only tests whose class.name holds it (repeatable)")
    p.add_argument("--timeout", type=int, default=120)
    run(p.parse_args())


if __name__ == "__main__":
    main()
