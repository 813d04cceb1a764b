"""Code generation: a kernel under a config, printed as the source its device compiles.

The C family differs only in a few words (`dialect.py`); each device renders through one of:

    c.py             C loop nests for the CPU device (`render_c`), written in stages: what
                     they share (`c_kernel.py`), the block function (`c_block.py`), the entry
                     point (`c_entry.py`), with the C every kernel includes (`c_support.py`) and
                     the panels it packs operands into (`panels.py`)
    gpu.py           one OpenCL C or CUDA C kernel for a GPU device (`render_gpu`), spelled in the
                     device's dialect (`gpu_dialects.py`)

Renderers read the knobs of a `Config` and the layouts the space defines (space/kernel_shape.py,
space/panel_layout.py, space/gpu_space.py): the space needs them for its validity rules and its
defaults, so it owns them, and nothing in space/ imports code generation.
"""
