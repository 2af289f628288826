"""Not imported as `sglang_spec_harness.sglang_cpu.stand_ins`: `sglang_spec_harness.sglang_cpu.shims` puts this directory on
a server's sys.path so that `import sgl_kernel` finds the stand-in package below. (This file makes a
non-editable install ship the directory.)"""
