#!/usr/bin/env python3
"""The device check's plumbing, on a machine without a GPU.

    test_gpu_check.py          bench/gpu_check.sh: the dry run here (no
                               device found, what the carry needs, the plan
                               within its caps, gpu_probe's verdict), then
                               real runs over a fake carry and fake library
                               folders: the search finds each library alone,
                               each step fails or skips alone, the probe's
                               verdict stops a run, --steps and --cap
    test_gpu_check.py --carry  bench/collect_gpu_carry.sh packs the programs
                               of this build: each run's archive and the
                               working tree stay under the device tool's
                               64 MiB (exit 77 where no CUDA build is here)

The fake programs are shell scripts: the real ones need a GPU, and what is
checked here is the script around them. Trees from TUTTI_SOURCE_DIR and
TUTTI_BINARY_DIR (CTest sets both).
"""

import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

SRC = pathlib.Path(os.environ.get("TUTTI_SOURCE_DIR",
                                  pathlib.Path(__file__).resolve().parents[2]))
BIN = pathlib.Path(os.environ.get("TUTTI_BINARY_DIR", SRC / "build"))
CHECK = SRC / "bench" / "gpu_check.sh"
COLLECT = SRC / "bench" / "collect_gpu_carry.sh"
LIMIT = 64 << 20
EIGHT_MINUTES = 480


def gpu_here():
    return os.path.exists("/dev/nvidia0") or shutil.which("nvidia-smi")


class FakeMachine:
    """A fake carry (bin/, MANIFEST) and fake CUDA library folders."""

    def __init__(self, tmp):
        self.tmp = pathlib.Path(tmp)
        self.carry = self.tmp / "carry"
        (self.carry / "bin").mkdir(parents=True)
        (self.carry / "lib").mkdir()
        (self.carry / "MANIFEST").write_text(
            "run: gpu-run1\ncuda_runtime: 13000 (static)\n"
            "cublas_major: 13\nnccl_major: 2\n")
        self.driver = self.tmp / "driver"
        self.site = self.tmp / "site"  # python's nvidia/* wheels, split
        self.library(self.driver, "libcuda.so.1")
        self.library(self.site / "nvidia/cublas/lib", "libcublas.so.13")
        self.library(self.site / "nvidia/cublas/lib", "libcublasLt.so.13")
        self.library(self.site / "nvidia/nccl/lib", "libnccl.so.2")
        self.probe(0, "ready", "libnccl.so.2 2.28.3")
        for name in ("test_cuda_kernels", "test_nccl_communicator",
                     "test_nccl_ranks"):
            self.program(name, 0)

    @staticmethod
    def library(folder, name):
        folder.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(b"")

    def program(self, name, status, say=""):
        path = self.carry / "bin" / name
        path.write_text(
            "#!/bin/sh\n"
            f'echo "{name} ran" >> "{self.tmp}/ran"\n'
            'echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"\n'
            f"{say}\nexit {status}\n")
        path.chmod(0o755)

    def probe(self, status, verdict, nccl):
        self.program("gpu_probe", status,
                     f'echo "nccl: {nccl}"\necho "verdict: {verdict}"')

    def ran(self):
        ran = self.tmp / "ran"
        return ran.read_text().split("\n") if ran.exists() else []

    def pack(self):
        """The carry as collect_gpu_carry.sh leaves it: BUILD/gpu-run1."""
        build = self.tmp / "build"
        (build / "gpu-run1").mkdir(parents=True)
        subprocess.run(f"tar -C {self.tmp} --transform s,^carry,gpu-carry, "
                       f"-cJf {build}/gpu-run1/carry.tar.xz carry", shell=True,
                       check=True, timeout=60)
        return build

    def run(self, *args, packed_in=None):
        carry = {"GPU_CHECK_BUILD_DIR": str(packed_in)} if packed_in else \
            {"TUTTI_GPU_CARRY": str(self.carry)}
        env = dict(os.environ, **carry,
                   GPU_CHECK_ASSUME_GPU="1", GPU_CHECK_SYSTEM_DIRS=str(self.driver),
                   GPU_CHECK_OUT=str(self.tmp / "out"), TMPDIR=str(self.tmp),
                   PYTHONPATH=str(self.site))
        for name in ("TUTTI_CUDA_LIB_DIRS", "TUTTI_GPU_CARRY"):
            if name not in carry:
                env.pop(name, None)
        done = subprocess.run(["bash", str(CHECK), *args], env=env, timeout=60,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True)
        return done.returncode, done.stdout


class DryRun(unittest.TestCase):
    def test_dry_run_here(self):
        env = dict(os.environ, GPU_CHECK_BUILD_DIR=str(BIN))
        done = subprocess.run(["bash", str(CHECK), "--dry-run"], env=env,
                              timeout=60, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
        out = done.stdout
        self.assertEqual(done.returncode, 77, out)
        if not gpu_here():
            self.assertIn("device: none here", out)
        for needed in ("driver   supporting CUDA", "GPU      Hopper",
                       "cuBLAS   libcublas.so.", "NCCL     libnccl.so.",
                       "libcuda.so.1 ", "DRY RUN: 0 passed, 0 failed"):
            self.assertIn(needed, out)
        plans = re.findall(r"^run (\d): (\d+) s of timeouts .*cap (\d+) s;"
                           r".*timeout_s (\d+)$", out, re.M)
        self.assertEqual([p[0] for p in plans], ["1", "2"], out)
        for _, total, cap, call in plans:
            self.assertLess(int(total), int(cap))
            self.assertLessEqual(int(call), EIGHT_MINUTES)
        probe = BIN / "bench" / "gpu_probe"
        if probe.exists() and not gpu_here():
            # The real probe, built with CUDA, finds no device here.
            self.assertIn("verdict: no device", out)
            self.assertIn("(exit 77:", out)

    @unittest.skipIf(gpu_here(), "this machine has a GPU")
    def test_a_run_without_gpu_is_a_dry_run(self):
        done = subprocess.run(["bash", str(CHECK), "--run", "2"], timeout=60,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True)
        self.assertEqual(done.returncode, 77, done.stdout)
        self.assertIn("DRY RUN (no GPU here)", done.stdout)

    def test_bad_arguments(self):
        for args, why in ((["--run", "3"], "--run takes 1 or 2"),
                          (["--steps", "nope"], "run 1 has no step 'nope'"),
                          (["--cap", "ten"], "--cap takes whole seconds"),
                          (["--fast"], "unknown argument --fast")):
            done = subprocess.run(["bash", str(CHECK), *args], timeout=60,
                                  stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True)
            self.assertEqual(done.returncode, 2, args)
            self.assertIn(why, done.stdout)


class Runs(unittest.TestCase):
    def setUp(self):
        self._tmp = tempfile.TemporaryDirectory()
        self.m = FakeMachine(self._tmp.name)

    def tearDown(self):
        self._tmp.cleanup()

    def test_each_library_found_in_its_own_folder(self):
        rc, out = self.m.run("--run", "1")
        self.assertEqual(rc, 0, out)
        site = self.m.site / "nvidia"
        for name, folder in (("libcuda.so.1", self.m.driver),
                             ("libcublas.so.13", site / "cublas/lib"),
                             ("libcublasLt.so.13", site / "cublas/lib"),
                             ("libnccl.so.2", site / "nccl/lib")):
            self.assertRegex(out, rf"\n  {re.escape(name)} +{re.escape(str(folder))}\n")
        path = re.search(r"^LD_LIBRARY_PATH=(.*)$", out, re.M).group(1).split(":")
        self.assertEqual(path[0], str(self.m.carry / "lib"))
        for folder in (self.m.driver, site / "cublas/lib", site / "nccl/lib"):
            self.assertIn(str(folder), path)
        self.assertIn("4 passed, 0 failed, 0 skipped", out)

    def test_the_packed_carry_is_unpacked(self):
        build = self.m.pack()
        shutil.rmtree(self.m.carry)
        rc, out = self.m.run("--run", "1", packed_in=build)
        self.assertEqual(rc, 0, out)
        self.assertIn("  run: gpu-run1", out)
        self.assertIn("4 passed, 0 failed, 0 skipped", out)
        rc, out = self.m.run("--run", "2", packed_in=build)
        self.assertEqual(rc, 1, out)
        self.assertIn("FAIL: carry (not carried)", out)

    def test_a_missing_library_is_named_alone(self):
        (self.m.site / "nvidia/nccl/lib/libnccl.so.2").unlink()
        _, out = self.m.run("--run", "1")
        self.assertRegex(out, r"\n  libnccl.so.2 +NOT FOUND\n")
        self.assertRegex(out, r"\n  libcublas.so.13 +\S+/nvidia/cublas/lib\n")

    def test_steps_fail_alone(self):
        self.m.program("test_cuda_kernels", 1, 'echo "an op differs"')
        (self.m.carry / "bin" / "test_nccl_communicator").unlink()
        rc, out = self.m.run("--run", "1")
        self.assertEqual(rc, 1, out)
        self.assertIn("PASS: probe (ready)", out)
        self.assertIn("FAIL: test_cuda_kernels (exit 1)", out)
        self.assertIn("FAIL: test_nccl_communicator "
                      "(test_nccl_communicator is not in this carry)", out)
        self.assertIn("PASS: test_nccl_ranks", out)
        self.assertIn("2 passed, 2 failed, 0 skipped", out)
        summary = (self.m.tmp / "out" / "summary-run1.txt").read_text()
        self.assertEqual(len(summary.splitlines()), 4)
        self.assertTrue((self.m.tmp / "out" / "logs-run1.tar.gz").exists())

    @unittest.skipUnless(shutil.which("cc"), "no C compiler")
    def test_a_program_that_cannot_load_fails_alone(self):
        lib, prog = self.m.tmp / "libgone.so", self.m.tmp / "needs_gone.c"
        prog.write_text("int main(void) { return 0; }\n")
        subprocess.run(["cc", "-shared", "-o", str(lib), "-x", "c", "/dev/null"],
                       check=True, timeout=60)
        target = self.m.carry / "bin" / "test_cuda_kernels"
        subprocess.run(["cc", "-o", str(target), str(prog),
                        f"-L{self.m.tmp}", "-Wl,--no-as-needed", "-lgone"],
                       check=True, timeout=60)
        lib.unlink()
        rc, out = self.m.run("--run", "1")
        self.assertEqual(rc, 1, out)
        self.assertIn("FAIL: test_cuda_kernels (test_cuda_kernels cannot load "
                      "libgone.so)", out)
        self.assertIn("3 passed, 1 failed, 0 skipped", out)

    def test_a_gpu_test_that_skips_on_the_gpu_machine_failed(self):
        self.m.program("test_cuda_kernels", 77,
                       'echo "SKIPPED test_cuda_kernels: no CUDA device"')
        rc, out = self.m.run("--run", "1")
        self.assertEqual(rc, 1, out)
        self.assertIn("FAIL: test_cuda_kernels (skipped on a GPU machine: "
                      "SKIPPED test_cuda_kernels: no CUDA device)", out)

    def test_without_nccl_the_nccl_steps_skip(self):
        self.m.probe(3, "kernels only: libnccl.so.2 not loadable; the NCCL "
                     "steps skip", "libnccl.so.2 not loadable")
        rc, out = self.m.run("--run", "1")
        self.assertEqual(rc, 0, out)
        self.assertIn("SKIP: test_nccl_communicator (no usable NCCL: "
                      "libnccl.so.2 not loadable)", out)
        self.assertIn("SKIP: test_nccl_ranks", out)
        self.assertIn("2 passed, 0 failed, 2 skipped", out)

    def test_the_probe_verdict_stops_the_run(self):
        self.m.probe(1, "cannot run: the driver supports CUDA 12.4, the carry "
                     "needs CUDA 13.x", "libnccl.so.2 2.21.5")
        rc, out = self.m.run("--run", "1")
        self.assertEqual(rc, 1, out)
        self.assertIn("FAIL: probe (cannot run: the driver supports CUDA 12.4",
                      out)
        self.assertIn("nothing else is tried", out)
        self.assertEqual([r for r in self.m.ran() if r], ["gpu_probe ran"])
        self.assertIn("0 passed, 1 failed, 0 skipped", out)

    def test_steps_and_cap(self):
        rc, out = self.m.run("--run", "1", "--steps", "test_nccl_ranks")
        self.assertEqual(rc, 0, out)
        self.assertEqual([r for r in self.m.ran() if r],
                         ["gpu_probe ran", "test_nccl_ranks ran"])
        self.assertIn("2 passed, 0 failed, 0 skipped", out)
        # 100 s: the probe fits, the kernels' 240 s do not; the NCCL steps do.
        rc, out = self.m.run("--run", "1", "--cap", "100")
        self.assertEqual(rc, 0, out)
        self.assertIn("SKIP: test_cuda_kernels (run budget: ", out)
        self.assertIn("3 passed, 0 failed, 1 skipped", out)


def carry_fits():
    """Packs this build's GPU programs; 0 when both runs fit, 77 when not
    buildable here."""
    cache = BIN / "CMakeCache.txt"
    if not cache.exists() or not list(BIN.glob("CMakeFiles/*/CMakeCUDACompiler.cmake")):
        print(f"SKIPPED test_gpu_carry_size: {BIN} has no CUDA build")
        return 77
    with tempfile.TemporaryDirectory() as tmp:
        # xz -0: faster than the real -6 and larger, so a bound on it.
        done = subprocess.run(["bash", str(COLLECT), "--no-build", "--out", tmp,
                               "--xz", "0", str(BIN)], cwd=SRC, timeout=240,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True)
        print(done.stdout, end="")
        if "is not built" in done.stdout:
            print("SKIPPED test_gpu_carry_size: build the GPU programs first")
            return 77
        if done.returncode != 0:
            print(f"FAILED: collect_gpu_carry.sh exited {done.returncode}")
            return 1
        for run in ("gpu-run1", "gpu-run2"):
            archive = pathlib.Path(tmp) / run / "carry.tar.xz"
            size = archive.stat().st_size
            listing = subprocess.run(["tar", "-tJf", str(archive)], check=True,
                                     timeout=120, stdout=subprocess.PIPE,
                                     text=True).stdout.split()
            if "gpu-carry/bin/gpu_probe" not in listing or "gpu-carry/MANIFEST" not in listing:
                print(f"FAILED: {run} lacks gpu_probe or its MANIFEST")
                return 1
            print(f"{run}: {size / 2**20:.1f} MiB at xz -0")
            if size >= LIMIT:
                print(f"FAILED: {run} is over 64 MiB")
                return 1
    print("1 passed, 0 failed")
    return 0


if __name__ == "__main__":
    if sys.argv[1:] == ["--carry"]:
        sys.exit(carry_fits())
    unittest.main(verbosity=2)
