#!/usr/bin/python3
"""Runs rdma-core's own test suite (Debian's python3-pyverbs tests) and prints, per test
module, how many tests passed, failed (or raised) and were skipped, then one PASS/FAIL
line per module that ran something (FAIL: a failure or error in it).

    table.py TESTS_DIR --dev DEVICE [--gid GID_INDEX] [--json FILE]

TESTS_DIR holds the suite, uncompressed (run.sh prepares it). Skips are the suite's own
verdict that a device lacks a feature; the reasons are summarised at the end. --json
writes every test's outcome ({"tests": {id: {"module", "status", "reason"}}}, status
passed / failed / skipped, reason the skip message or the failure's last line).

    table.py --compare A.json B.json [--names A,B] [--prefix NAME]

Side by side: a Markdown table per module (A's and B's passed / failed / skipped), then
every test that passes on A and not on B with B's reason. A is the reference (rxe), B
the device under test (ferroce). One PASS/FAIL line per module where A passed a test:
FAIL when one of them fails on B or is missing from B's run (a skip on B is B's own
verdict that it lacks a feature, listed but not a failure); "NAME: N passed, M failed".
Exit 0 iff no FAIL.
"""
import collections
import importlib.util
import json
import os
import sys
import unittest


def walk(s):
    for x in s:
        if isinstance(x, unittest.TestSuite):
            yield from walk(x)
        else:
            yield x


def short_id(test_id):
    """'tests.test_qp.QPTest.test_x' -> 'test_qp.QPTest.test_x'; class and module set-up
    errors ('setUpClass (tests.test_qp.QPTest)') keep their form without the prefix."""
    return test_id.replace("tests.", "", 1) if "tests." in test_id else test_id


def module_of(test_id):
    s = short_id(test_id)
    if "(" in s:                      # setUpClass (test_qp.QPTest)
        s = s.split("(", 1)[1]
    return s.split(".")[0].strip(" )")


def one_line(text, limit=160):
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


class Result(unittest.TestResult):
    """unittest's result, plus the ids of the tests that succeeded."""
    def __init__(self):
        super().__init__()
        self.passed = []

    def addSuccess(self, test):
        super().addSuccess(test)
        self.passed.append(test.id())

    def addExpectedFailure(self, test, err):
        super().addExpectedFailure(test, err)
        self.passed.append(test.id())


def run_suite():
    tests_dir = sys.argv[1]
    json_out = None
    args = sys.argv[2:]
    if "--json" in args:
        i = args.index("--json")
        json_out = args[i + 1]
        del args[i:i + 2]
    # The suite reads its own options (--dev, --gid, ...) through args_parser.
    sys.argv = [sys.argv[0]] + args
    sys.path.insert(0, tests_dir)
    from args_parser import parser
    parser.parse_args()
    spec = importlib.util.spec_from_file_location(
        "tests", os.path.join(tests_dir, "__init__.py"), submodule_search_locations=[tests_dir])
    tests = importlib.util.module_from_spec(spec)
    sys.modules["tests"] = tests
    spec.loader.exec_module(tests)

    suite = unittest.TestSuite()
    for m in tests.__test_modules__:
        suite.addTests(unittest.defaultTestLoader.loadTestsFromModule(m))
    # The suite lets go of each test once run: list them first.
    all_ids = [t.id() for t in walk(suite)]
    result = Result()
    suite.run(result)

    # One outcome per test; a failing subtest fails its test, class set-up errors are
    # entries of their own, and a test that never reported is a failure.
    outcome = {}
    for i in all_ids:
        outcome[short_id(i)] = {"module": module_of(i), "status": "failed",
                                "reason": "did not run (no result reported)"}
    for i in result.passed:
        outcome[short_id(i)] = {"module": module_of(i), "status": "passed", "reason": ""}
    for t, why in result.skipped:
        outcome[short_id(t.id())] = {"module": module_of(t.id()), "status": "skipped",
                                     "reason": one_line(why)}
    for t, tb in result.failures + result.errors:
        i = short_id(getattr(t, "test_case", t).id())
        lines = tb.strip().splitlines()
        outcome[i] = {"module": module_of(i), "status": "failed",
                      "reason": one_line(lines[-1] if lines else "")}
    for t in result.unexpectedSuccesses:
        outcome[short_id(t.id())] = {"module": module_of(t.id()), "status": "failed",
                                     "reason": "unexpected success"}

    counts = collections.defaultdict(collections.Counter)
    skip_reasons = collections.Counter()
    for i, o in outcome.items():
        counts[o["module"]][o["status"]] += 1
        if o["status"] == "skipped":
            skip_reasons[o["reason"].split("(")[0].strip()[:80]] += 1

    print(f"{'module':28} {'passed':>6} {'failed':>6} {'skipped':>7}")
    for m in sorted(counts):
        c = counts[m]
        print(f"{m:28} {c['passed']:6} {c['failed']:6} {c['skipped']:7}")
    tot = sum((counts[m] for m in counts), collections.Counter())
    print(f"{'total':28} {tot['passed']:6} {tot['failed']:6} {tot['skipped']:7}  ({result.testsRun} run)")
    for i, o in sorted(outcome.items()):
        if o["status"] == "failed":
            print(f"--- {i}\n{o['reason']}")
    print("skip reasons:")
    for why, n in skip_reasons.most_common():
        print(f"  {n:4}  {why}")
    for m in sorted(counts):
        c = counts[m]
        if c["passed"] + c["failed"] == 0:
            continue
        verdict = "FAIL" if c["failed"] else "PASS"
        print(f"{verdict} rdma-core {m}: {c['passed']} passed, {c['failed']} failed, {c['skipped']} skipped")
    if json_out:
        with open(json_out, "w") as f:
            json.dump({"tests": outcome, "run": result.testsRun}, f, indent=1, sort_keys=True)


def compare(argv):
    a_file, b_file = argv[0], argv[1]
    opts = dict(zip(argv[2::2], argv[3::2]))
    a_name, b_name = opts.get("--names", "rxe,ferroce").split(",")
    prefix = opts.get("--prefix", "rdma-core-compare")
    with open(a_file) as f:
        a = json.load(f)["tests"]
    with open(b_file) as f:
        b = json.load(f)["tests"]

    counts = {n: collections.defaultdict(collections.Counter) for n in (a_name, b_name)}
    for name, res in ((a_name, a), (b_name, b)):
        for o in res.values():
            counts[name][o["module"]][o["status"]] += 1
    modules = sorted(set(counts[a_name]) | set(counts[b_name]))

    def cell(c):
        return f"{c['passed']} / {c['failed']} / {c['skipped']}"

    print(f"| module | {a_name} passed / failed / skipped | {b_name} passed / failed / skipped |")
    print("| --- | --- | --- |")
    tot = {n: collections.Counter() for n in counts}
    for m in modules:
        ca, cb = counts[a_name][m], counts[b_name][m]
        tot[a_name].update(ca)
        tot[b_name].update(cb)
        print(f"| {m} | {cell(ca)} | {cell(cb)} |")
    print(f"| total | {cell(tot[a_name])} | {cell(tot[b_name])} |")

    # Every test that passes on A and not on B, by module, with B's reason.
    gaps = collections.defaultdict(list)      # module -> [(test, B status, reason)]
    for i in sorted(a):
        if a[i]["status"] != "passed":
            continue
        o = b.get(i)
        if o is None:
            gaps[a[i]["module"]].append((i, "missing", f"not in {b_name}'s run"))
        elif o["status"] != "passed":
            gaps[a[i]["module"]].append((i, o["status"], o["reason"]))
    n_gaps = sum(len(g) for g in gaps.values())
    print(f"{prefix}: passing on {a_name}, not on {b_name}: {n_gaps}")
    for m in sorted(gaps):
        for i, status, why in gaps[m]:
            print(f"    {i}: {b_name} {status}: {why}")
    better = sorted(i for i in b if b[i]["status"] == "passed" and a.get(i, {}).get("status") != "passed")
    if better:
        print(f"{prefix}: passing on {b_name}, not on {a_name}: {len(better)}")
        for i in better:
            o = a.get(i)
            print(f"    {i}: {a_name} {o['status'] + ': ' + o['reason'] if o else 'missing'}")

    # Failures on B that are no loss against A (A fails or skips them too): not this
    # comparison's verdict (B's own run fails on them), but shown.
    also = sorted(i for i in b if b[i]["status"] == "failed" and a.get(i, {}).get("status") != "passed")
    if also:
        print(f"{prefix}: failing on {b_name}, not passing on {a_name} either: {len(also)}")
        for i in also:
            o = a.get(i)
            print(f"    {i}: {b_name}: {b[i]['reason']}; {a_name} {o['status'] if o else 'missing'}")

    passed = failed = 0
    for m in modules:
        ca, cb = counts[a_name][m], counts[b_name][m]
        if not ca["passed"]:
            continue
        by = collections.defaultdict(list)
        for i, status, _ in gaps.get(m, []):
            by[status].append(i.split(".")[-1])
        what = f"{ca['passed']} pass on {a_name}, {ca['passed'] - len(gaps.get(m, []))} of them on {b_name}"
        if by["skipped"]:
            what += f", {len(by['skipped'])} skipped there ({', '.join(by['skipped'])})"
        if by["failed"] or by["missing"] or by["skipped"]:
            failed += 1
            for status, words in (("failed", "fail there"), ("missing", "missing from its run")):
                if by[status]:
                    what += f", {len(by[status])} {words} ({', '.join(by[status])})"
            print(f"FAIL {prefix} {m}: {what}")
        else:
            passed += 1
            print(f"PASS {prefix} {m}: {what}")
    print(f"{prefix}: {passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    if len(sys.argv) >= 4 and sys.argv[1] == "--compare":
        sys.exit(compare(sys.argv[2:]))
    run_suite()
