"""PyTorch's own distributed test base, run against a backend: chorus, gloo, or any registered one.

torch ships `torch/testing/_internal/distributed/distributed_test.py` (about 280 tests of every
collective, DDP, groups, error paths) inside its wheel; PyTorch's CI runs it through
test/distributed/test_distributed_spawn.py, which is not shipped. This driver is that file's
equivalent for any backend: it sets the environment the test base reads (BACKEND, WORLD_SIZE,
TEMP_DIR; every test initialises with file://), imports chorus_torch in the parent and in every
spawned rank (spawn re-imports this module), runs the tests and writes each test's outcome.

    PYTHONPATH=build/python .torch-venv/bin/python tools/torch_dist_suite.py run chorus 2 chorus-2.json
    PYTHONPATH=build/python .torch-venv/bin/python tools/torch_dist_suite.py run gloo 2 gloo-2.json
    PYTHONPATH=build/python .torch-venv/bin/python tools/torch_dist_suite.py run chorus-as-gloo 2 as-gloo-2.json
    .torch-venv/bin/python tools/torch_dist_suite.py compare gloo-2.json chorus-2.json

`chorus-as-gloo` runs the test base exactly as for gloo (BACKEND=gloo: its gates and the branches
of its test bodies), with every group it makes chorus's: torch.distributed's Backend maps the name
"gloo" to chorus. `run` options: -k SUBSTRING (only tests whose name holds it, repeatable), --timeout S (per test,
default 120; PyTorch's default is 300), --features F,G (the test base's
DistTestCases.backend_feature sets to add the backend's name to before its decorators run; chorus:
ddp, subgroup and plugin, what it has on CPU tensors, not gpu or cuda), --gates-of NAME (the test
base skips many tests for any backend not named gloo or nccl: with --gates-of gloo its decorators
decide which tests run as they would for gloo, and the tests then run on BACKEND, whose name the
test bodies see). `compare` prints the counts of both and every test the first passed and the
second did not, with the second's reason.
"""
import argparse
import json
import os
import re
import sys
import tempfile
import time
import unittest


def _environment(backend, world, timeout, features, gates):
    os.environ["BACKEND"] = backend
    os.environ["TORCH_DIST_SUITE_GATES"] = gates or ""
    os.environ["TORCH_DIST_SUITE_FEATURES"] = features
    os.environ["WORLD_SIZE"] = str(world)
    os.environ.setdefault("TEMP_DIR", tempfile.mkdtemp(prefix="torch_dist_suite_"))
    os.environ["DISTRIBUTED_TESTS_DEFAULT_TIMEOUT"] = str(timeout)


# What chorus has of the test base's backend features (DistTestCases.backend_feature): DDP,
# subgroups, and being a plugin; not gpu/cuda (CUDA tensors go to ProcessGroupNCCL).
CHORUS_FEATURES = "ddp,subgroup,plugin"


def gloo_means_chorus():
    """The name "gloo" names chorus wherever torch.distributed reads a backend's name (its Backend
    class maps it): tests written for gloo, bodies and gates alike, run on chorus's groups."""
    import chorus_torch  # noqa: F401  registers "chorus"
    from torch.distributed import Backend

    if getattr(Backend, "_suite_gloo_means_chorus", False):
        return
    named = Backend.__new__

    def as_chorus(cls, name):
        value = named(cls, name)
        return Backend("chorus") if value == Backend.GLOO else value

    Backend.__new__ = staticmethod(as_chorus)
    Backend._suite_gloo_means_chorus = True


def _define_test_class():
    """The test base's class for this backend, at this module's top level, where pickle finds it."""
    backend = os.environ["BACKEND"]
    if backend == "chorus":
        import chorus_torch  # noqa: F401
    if os.environ.get("TORCH_DIST_SUITE_AS_GLOO"):
        gloo_means_chorus()
    import torch
    from torch.testing._internal.common_distributed import DistTestCases

    # The test base gates tests on feature sets of backend names, read as its decorators run at
    # import: a backend outside PyTorch adds its name to the features it has.
    for feature in filter(None, os.environ.get("TORCH_DIST_SUITE_FEATURES", "").split(",")):
        DistTestCases.backend_feature.setdefault(feature, set()).add(backend)
    if os.environ.get("TORCH_DIST_SUITE_AS_GLOO"):
        # Its checks that a backend is available read Backend(BACKEND), which names chorus now: a plugin.
        DistTestCases.backend_feature.setdefault("plugin", set()).add("chorus")
    # --gates-of: the decorators read another backend's name (BACKEND as they run at import), the
    # tests then run on this one (the module's BACKEND, which _run and the test bodies read).
    gates = os.environ.get("TORCH_DIST_SUITE_GATES") or backend
    os.environ["BACKEND"] = gates
    try:
        from torch.testing._internal.distributed import distributed_test
    finally:
        os.environ["BACKEND"] = backend
    distributed_test.BACKEND = backend
    DistributedTest, TestDistBackend = distributed_test.DistributedTest, distributed_test.TestDistBackend

    class TestDistBackendWithSpawn(TestDistBackend, DistributedTest._DistTestBase):
        def setUp(self):
            super().setUp()
            self._spawn_processes()
            torch.backends.cudnn.flags(enabled=True, allow_tf32=False).__enter__()

    TestDistBackendWithSpawn.__qualname__ = "TestDistBackendWithSpawn"
    globals()["TestDistBackendWithSpawn"] = TestDistBackendWithSpawn
    return TestDistBackendWithSpawn


# Spawned ranks import this module again (as __mp_main__), with the parent's environment: they need
# the backend registered and the class defined.
if __name__ == "__mp_main__" and "BACKEND" in os.environ:
    _define_test_class()


class _Outcomes(unittest.TextTestResult):
    """Keeps every test's outcome, time and first line of its reason."""

    name_parts = 1  # a test's name: the last parts of its id (1: the method; 2: class.method)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.outcomes = {}
        self._started = {}

    def startTest(self, test):
        self._started[test.id()] = time.monotonic()
        super().startTest(test)

    def _record(self, test, outcome, reason=""):
        name = ".".join(test.id().split(".")[-self.name_parts:])
        took = time.monotonic() - self._started.get(test.id(), time.monotonic())
        # Without torch's own hint on how to rerun the test ("To execute this test, run ...:",
        # "    python FILE.py Class.test", "This message can be suppressed ..."), which ends every
        # failure's text.
        hint = re.compile(r"To execute this test|PYTORCH_PRINT_REPRO_ON_FAILURE|^\s+python \S+\.py \S+$")
        lines = [line for line in str(reason).strip().splitlines() if line.strip() and not hint.search(line)]
        # The last lines of a traceback name the error; keep a few.
        self.outcomes[name] = {"outcome": outcome, "seconds": round(took, 2), "reason": "\n".join(lines[-6:])}

    def addSuccess(self, test):
        super().addSuccess(test)
        self._record(test, "passed")

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self._record(test, "failed", self._exc_info_to_string(err, test))

    def addError(self, test, err):
        super().addError(test, err)
        self._record(test, "error", self._exc_info_to_string(err, test))

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        self._record(test, "skipped", reason)

    def addExpectedFailure(self, test, err):
        super().addExpectedFailure(test, err)
        self._record(test, "passed", "expected failure")

    def addUnexpectedSuccess(self, test):
        super().addUnexpectedSuccess(test)
        self._record(test, "failed", "unexpected success")


def _counts(outcomes):
    counts = {"passed": 0, "failed": 0, "error": 0, "skipped": 0}
    for o in outcomes.values():
        counts[o["outcome"]] += 1
    return counts


def run(args):
    features = args.features
    if features is None:
        features = CHORUS_FEATURES if args.backend == "chorus" else ""
    # chorus-as-gloo: the test base runs as for gloo, every group it makes is chorus's.
    as_gloo = args.backend == "chorus-as-gloo"
    os.environ["TORCH_DIST_SUITE_AS_GLOO"] = "1" if as_gloo else ""
    _environment("gloo" if as_gloo else args.backend, args.world, args.timeout, features, args.gates_of)
    import torch

    TestDistBackendWithSpawn = _define_test_class()
    loader = unittest.TestLoader()
    names = loader.getTestCaseNames(TestDistBackendWithSpawn)
    if args.k:
        names = [n for n in names if any(k in n for k in args.k)]
    suite = unittest.TestSuite(TestDistBackendWithSpawn(n) for n in names)
    start = time.monotonic()
    runner = unittest.TextTestRunner(verbosity=2, resultclass=_Outcomes, stream=sys.stderr)
    result = runner.run(suite)
    counts = _counts(result.outcomes)
    record = {"backend": args.backend, "gates_of": args.gates_of, "world_size": args.world, "torch": torch.__version__,
              "seconds": round(time.monotonic() - start, 1), "counts": counts, "tests": result.outcomes}
    with open(args.out, "w") as f:
        json.dump(record, f, indent=1, sort_keys=True)
    gates = f" (gates of {args.gates_of})" if args.gates_of else ""
    print(f"{args.backend}{gates} world {args.world} torch {torch.__version__}: {counts['passed']} passed, "
          f"{counts['failed']} failed, {counts['error']} errors, {counts['skipped']} skipped "
          f"in {record['seconds']} s -> {args.out}")


def compare(args):
    with open(args.first) as f:
        first = json.load(f)
    with open(args.second) as f:
        second = json.load(f)
    for r in (first, second):
        c = r["counts"]
        gates = f" (gates of {r['gates_of']})" if r.get("gates_of") else ""
        print(f"{r['backend']}{gates} world {r['world_size']}: {c['passed']} passed, {c['failed']} failed, "
              f"{c['error']} errors, {c['skipped']} skipped")
    missing = sorted(n for n, o in first["tests"].items()
                     if o["outcome"] == "passed" and second["tests"].get(n, {}).get("outcome") != "passed")
    print(f"{len(missing)} tests {first['backend']} passed and {second['backend']} did not:")
    for n in missing:
        o = second["tests"].get(n, {"outcome": "absent", "reason": ""})
        reason = o["reason"].splitlines()[-1] if o["reason"] else ""
        print(f"  {n}: {o['outcome']}: {reason}")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run")
    r.add_argument("backend")
    r.add_argument("world", type=int)
    r.add_argument("out")
    r.add_argument("-k", action="append")
    r.add_argument("--timeout", type=int, default=120)
    r.add_argument("--features", help=f"feature sets to add the backend to (chorus: {CHORUS_FEATURES})")
    r.add_argument("--gates-of", help="decide which tests run as for this backend's name (e.g. gloo), run them on BACKEND")
    c = sub.add_parser("compare")
    c.add_argument("first")
    c.add_argument("second")
    args = p.parse_args()
    run(args) if args.command == "run" else compare(args)


if __name__ == "__main__":
    main()
