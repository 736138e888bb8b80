"""Fixtures of the integration tests: the real astr-worker / astr-scheduler on loopback.

Every test file runs as its own ctest entry (integration_<file>), so files run in parallel;
within a file, the `cluster` fixture (one stories260K worker + one scheduler) is shared by the
module, and `make_cluster` starts dedicated ones that die at the end of the test.
"""

import os
import shutil
import sys
import tempfile
import time

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import harness  # noqa: E402


def pytest_collection_modifyitems(config, items):
    for item in items:
        # A module may declare NEEDS_BINARIES; by default it needs the worker, scheduler and CLI.
        needed = getattr(item.module, "NEEDS_BINARIES", None)
        missing = harness.missing_binaries(needed) if needed else harness.missing_binaries()
        reason = None
        if missing:
            reason = f"service binaries not built: {', '.join(missing)}"
        elif not os.path.exists(harness.STORIES):
            reason = f"test model missing: {harness.STORIES}"
        if reason:
            item.add_marker(pytest.mark.skip(reason=reason))


# Log tails of the processes alive during a failed test go into its report.
@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    if not rep.failed:
        return
    since = getattr(item, "_astr_started", 0)
    for p in harness.ALL_PROCS:
        if p.closed_at is None or p.closed_at >= since:
            rc = p.proc.poll()
            state = "running" if rc is None else f"exited {rc}"
            rep.sections.append(
                (f"{p.name} log tail ({state}; {p.log_path})", p.log_tail(60))
            )


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    item._astr_started = time.monotonic()


@pytest.fixture(scope="session")
def log_dir(request):
    """Server logs of the session; kept (and named in the failure report) only when a test failed."""
    d = tempfile.mkdtemp(prefix="astr-itest-logs-")
    yield d
    if request.session.testsfailed == 0:
        shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="module")
def cluster(log_dir):
    """One stories260K worker (1 thread) and a scheduler, shared by the module's tests."""
    c = harness.make_cluster(
        _subdir(log_dir),
        worker_flags={"num_pages": 2048, "page_size": 16},
        scheduler_flags={"max_n": 4},
    )
    yield c
    c.close()


def _subdir(log_dir):
    return tempfile.mkdtemp(dir=log_dir)


@pytest.fixture
def make_cluster(log_dir):
    """Factory of dedicated clusters (killed at the end of the test)."""
    made = []

    def make(**kwargs):
        c = harness.make_cluster(_subdir(log_dir), **kwargs)
        made.append(c)
        return c

    yield make
    for c in made:
        c.close()


@pytest.fixture
def new_cluster(log_dir):
    """An empty Cluster for tests that start processes one by one."""
    made = []

    def make():
        c = harness.Cluster(_subdir(log_dir))
        made.append(c)
        return c

    yield make
    for c in made:
        c.close()


SLOW_PHASE_S = 20.0


def pytest_terminal_summary(terminalreporter):
    """Names any test phase over SLOW_PHASE_S (visible with ctest -V or on failure): the suite is
    meant to take seconds per file, so a slow phase is worth a look even when it passes."""
    slow = []
    for reports in terminalreporter.stats.values():
        for rep in reports:
            if getattr(rep, "duration", 0) > SLOW_PHASE_S and getattr(rep, "when", None):
                slow.append(f"{rep.duration:7.1f} s {rep.when:8s} {rep.nodeid}")
    if slow:
        terminalreporter.write_sep("-", f"phases over {SLOW_PHASE_S:.0f} s")
        for line in sorted(slow, reverse=True):
            terminalreporter.write_line(line)
