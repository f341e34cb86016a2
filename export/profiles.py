"""Deployment target profiles: memory budgets and a cycles-per-MAC estimate per precision.

The cycles/MAC figures are planning estimates for optimised kernels (CMSIS-NN on Cortex-M,
ESP-NN on the ESP32-S3, XNNPACK on arm64), not measurements; ``check_budget`` uses them to
estimate the CPU load of real-time streaming and fails a profile above ``max_load``.
"""

from __future__ import annotations

import dataclasses

from .errors import ExportError


@dataclasses.dataclass(frozen=True)
class TargetProfile:
    name: str
    description: str
    sram_bytes: int
    flash_bytes: int
    cpu_hz: float
    cycles_per_mac: dict[str, float]  # precision -> cycles per MAC
    max_load: float = 0.5  # fraction of the CPU the model may take in real time

    def __post_init__(self):
        if self.sram_bytes <= 0 or self.flash_bytes <= 0 or self.cpu_hz <= 0:
            raise ExportError(f"profile {self.name!r}: budgets and clock must be positive")
        if not 0 < self.max_load <= 1:
            raise ExportError(f"profile {self.name!r}: max_load={self.max_load} not in (0, 1]")


KB, MB = 1024, 1024 * 1024
PROFILES: dict[str, TargetProfile] = {
    p.name: p
    for p in (
        TargetProfile(
            "cortex-m4",
            "Cortex-M4F @ 168 MHz (STM32F4-class), CMSIS-NN",
            256 * KB,
            1 * MB,
            168e6,
            {"int8": 1.2, "fp32": 4.0},
        ),
        TargetProfile(
            "cortex-m7",
            "Cortex-M7 @ 480 MHz (STM32H7-class), CMSIS-NN",
            512 * KB,
            2 * MB,
            480e6,
            {"int8": 0.8, "fp32": 2.0},
        ),
        TargetProfile(
            "cortex-m55",
            "Cortex-M55 @ 400 MHz with Helium (MVE), CMSIS-NN",
            1 * MB,
            2 * MB,
            400e6,
            {"int8": 0.25, "fp32": 1.0},
        ),
        TargetProfile(
            "esp32-s3",
            "ESP32-S3 Xtensa LX7 @ 240 MHz (one core), ESP-NN",
            512 * KB,
            8 * MB,
            240e6,
            {"int8": 0.6, "fp32": 5.0},
        ),
        TargetProfile(
            "android-arm64",
            "one Cortex-A7x big core @ 2.4 GHz, XNNPACK",
            512 * MB,
            512 * MB,
            2.4e9,
            {"int8": 0.06, "fp32": 0.12},
            max_load=0.25,
        ),
    )
}


def get_profile(name: str) -> TargetProfile:
    if name not in PROFILES:
        raise ExportError(f"unknown profile {name!r}; choose one of {sorted(PROFILES)}")
    return PROFILES[name]


def ram_bytes(report: dict) -> int:
    """RAM the deployed model needs: the TFLM arena, else the planned (or activation)
    memory, plus the streaming state kept between hops (fp32 or int8)."""
    mem = report.get("memory", {})
    ram = (
        mem.get("arena_bytes") or mem.get("planned_bytes") or mem.get("activation_tensor_bytes", 0)
    )
    elem = 1 if report["precision"] == "int8" else 4
    state = sum(elem * _prod(s) for s in report["io"]["state_shapes"])
    return int(ram) + int(state)


def _prod(shape) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n


def check_budget(report: dict, profile: str) -> dict:
    """The profile verdict recorded in report.json: flash, RAM, cycles/s and load."""
    p = get_profile(profile)
    flash = int(report["bytes"])
    ram = ram_bytes(report)
    cycles = report["mac_per_s"] * p.cycles_per_mac[report["precision"]]
    load = cycles / p.cpu_hz
    violations = []
    if flash > p.flash_bytes:
        violations.append(f"flash {flash:,} B > {p.flash_bytes:,} B")
    if ram > p.sram_bytes:
        violations.append(f"RAM {ram:,} B (arena/planned + state) > SRAM {p.sram_bytes:,} B")
    if load > p.max_load:
        violations.append(
            f"estimated CPU load {load:.1%} ({cycles / 1e6:.1f} Mcycles/s at "
            f"{p.cycles_per_mac[report['precision']]} cycles/MAC) > {p.max_load:.0%} of "
            f"{p.cpu_hz / 1e6:.0f} MHz"
        )
    return {
        "name": p.name,
        "description": p.description,
        "flash_bytes": flash,
        "flash_budget": p.flash_bytes,
        "ram_bytes": ram,
        "ram_budget": p.sram_bytes,
        "cycles_per_mac": p.cycles_per_mac[report["precision"]],
        "cycles_per_s": int(cycles),
        "cpu_hz": int(p.cpu_hz),
        "load": round(load, 4),
        "max_load": p.max_load,
        "fits": not violations,
        "violations": violations,
    }
