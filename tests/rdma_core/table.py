#!/usr/bin/python3
"""Runs rdma-core's own test suite (Debian's python3-pyverbs tests) and prints, per test
module, how many tests passed, failed (or raised) and were skipped, then one PASS/FAIL
line per module that ran something (FAIL: a failure or error in it).

    table.py TESTS_DIR --dev DEVICE [--gid GID_INDEX]

TESTS_DIR holds the suite, uncompressed (run.sh prepares it). Skips are the suite's own
verdict that a device lacks a feature; the reasons are summarised at the end.
"""
import collections
import importlib.util
import os
import sys
import unittest


def walk(s):
    for x in s:
        if isinstance(x, unittest.TestSuite):
            yield from walk(x)
        else:
            yield x


def main():
    tests_dir = sys.argv[1]
    # The suite reads its own options (--dev, --gid, ...) through args_parser.
    sys.argv = [sys.argv[0]] + sys.argv[2:]
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
    result = unittest.TestResult()
    suite.run(result)

    counts = collections.defaultdict(lambda: collections.Counter())
    skip_reasons = collections.Counter()

    def module(test):
        return test.id().split(".")[1] if "." in test.id() else test.id()

    failed = set()
    for t, _ in result.failures + result.errors:
        counts[module(t)]["failed"] += 1
        failed.add(t.id())
    for t, why in result.skipped:
        counts[module(t)]["skipped"] += 1
        skip_reasons[why.split("(")[0].strip()[:80]] += 1
    ran = result.testsRun
    # Passed = run, neither failed nor skipped: count them by walking the suite.
    skipped_ids = {t.id() for t, _ in result.skipped}

    for i in all_ids:
        if i not in failed and i not in skipped_ids:
            counts[i.split(".")[1]]["passed"] += 1

    print(f"{'module':28} {'passed':>6} {'failed':>6} {'skipped':>7}")
    for m in sorted(counts):
        c = counts[m]
        print(f"{m:28} {c['passed']:6} {c['failed']:6} {c['skipped']:7}")
    tot = sum((counts[m] for m in counts), collections.Counter())
    print(f"{'total':28} {tot['passed']:6} {tot['failed']:6} {tot['skipped']:7}  ({ran} run)")
    for t, tb in result.failures + result.errors:
        print(f"--- {t.id()}\n{tb.strip().splitlines()[-1]}")
    print("skip reasons:")
    for why, n in skip_reasons.most_common():
        print(f"  {n:4}  {why}")
    for m in sorted(counts):
        c = counts[m]
        if c["passed"] + c["failed"] == 0:
            continue
        verdict = "FAIL" if c["failed"] else "PASS"
        print(f"{verdict} rdma-core {m}: {c['passed']} passed, {c['failed']} failed, {c['skipped']} skipped")


if __name__ == "__main__":
    main()
