"""A CPU device that plants faults in the C of marked configs, for fault-injection tests.

The mark is the register block of the last output axis (`upcast`'s last value):
1 segfaults, 2 never returns, 4 writes one wrong value, 8 writes one element past the end of its
output, 16 one element before its start, 64 writes into its first input (leaving the output
right). Every other config is compiled as the CPU device compiles it. The device has one thread
and a target of 32-byte vectors whatever the machine's, so the space of a 1-D elementwise kernel
is just its block sizes and its default block is 32 (four vectors), never a marked one.
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools

from tunesearch.runtime import device as device_module
from tunesearch.runtime.cpu import CPUDevice
from tunesearch.runtime.device import DeviceEntry, DeviceInfo, Source

NAME = "faulty"
CRASH, HANG, WRONG, PAST_END, BEFORE_START, INTO_INPUT = 1, 2, 4, 8, 16, 64
OUT_OF_BOUNDS = PAST_END

# volatile: the compiler may neither drop a write it can prove out of bounds nor keep the value
_PLANTS = {
    CRASH: ("*(volatile int*)0 = 1;", ""),
    HANG: ("for (volatile int spin = 1; spin;) {}", ""),
    WRONG: ("", "data0[0] += 1.0f;"),
    PAST_END: ("", "((volatile float*)data0)[{size}] = 1.0f;"),
    BEFORE_START: ("", "((volatile float*)data0)[-1] = 1.0f;"),
    INTO_INPUT: ("", "((volatile float*)data1)[0] += 1.0f;"),
}


class FaultyDevice(CPUDevice):
    name = NAME

    @functools.cache
    def info(self) -> DeviceInfo:
        real = super().info()
        fingerprint = tuple((k, v) for k, v in real.fingerprint if k != "threads")
        return DeviceInfo("faulty", real.name, fingerprint + (("faults", "planted"),),
                          dataclasses.replace(real.target, threads=1, vector_bytes=32))

    def render(self, kernel, config, prepacked=frozenset()) -> Source:
        source = super().render(kernel, config, prepacked)
        head, tail = _PLANTS.get(config.get("upcast")[-1], ("", ""))
        if not head and not tail:
            return source
        text = source.text
        entry = text.index(f"\nvoid {source.entry}(")
        body = text.index("{", entry) + 1
        end = text.rindex("}")
        tail = tail.format(size=kernel.buffers[0].size)
        text = text[:body] + head + text[body:end] + tail + text[end:]
        return dataclasses.replace(source, text=text)


@contextlib.contextmanager
def registered():
    """The device, known by name (here and in the processes started meanwhile) until the end."""
    device_module.DEVICES[NAME] = DeviceEntry(
        f"{__name__}:FaultyDevice", "cpu", "the CPU device, with faults planted in marked configs")
    try:
        yield NAME
    finally:
        device_module.DEVICES.pop(NAME, None)
        device_module._instances.pop(NAME, None)
