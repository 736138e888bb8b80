import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def pytest_terminal_summary(terminalreporter):
    mod = sys.modules.get("test_reference_forward")
    if mod is None or not mod.MAX_DIFFS:
        return
    terminalreporter.write_sep("-", "astr vs float64 reference: max |logprob diff| per model/dtype")
    for key in sorted(mod.MAX_DIFFS):
        terminalreporter.write_line(f"{key:32s} {mod.MAX_DIFFS[key]:.3e}")
    for note in mod.NOTES:
        terminalreporter.write_line(f"note: {note}")
