"""A virtual microphone on PulseAudio or PipeWire (pipewire-pulse): ``qsa live --virtual-mic``.

    qsa live ──PortAudio "pulse"──> null sink ``NAME_sink`` ──monitor──> remap source ``NAME``
             (PULSE_SINK=NAME_sink)  (mono, abstract: nothing      ("qsa denoised microphone":
                                      is audible)                    what call apps list)

The remap source, unlike the sink's monitor, is an ordinary source, so applications that hide
monitors (browsers, Zoom, GNOME Settings) list it as a microphone. Both modules are loaded with
``pactl`` and tagged in their properties (``qsa.virtual_mic=NAME``, ``qsa.owner=PID:START:NS@HOST``
with the process's start time and pid namespace, so a reused pid is not mistaken for the owner,
and ``qsa.instance=TOKEN``). They are removed:

- on a normal exit, Ctrl-C or SIGTERM by ``VirtualMic.close`` (the stream is closed first);
- when qsa dies any other way (SIGKILL, SIGHUP, a crash, ``os._exit``) by a watchdog: a tiny
  ``sh`` in its own session that reads a pipe only qsa holds open; end of file without the
  word ``done`` means qsa is gone, and it unloads the modules tagged with this instance;
- if even that was killed, by the next ``qsa live --virtual-mic``: modules whose owner process
  is dead (same host and pid namespace) are unloaded before anything else;
- with the audio server: modules loaded at run time do not survive a restart of the server
  (``pactl subscribe`` tells qsa at once, and the session stops with a clear error instead of
  following a restarted server to another output).

On PulseAudio the sink is suspended from its creation until the watchdog's silent 20 ms
playback stream is connected to it (before qsa's own stream starts), and that stream stays
for the session: an idle null sink runs 2 s ahead, and a stream connected to it then waited
~2 s for its first sample to be taken (``VirtualMic._hold``).

The microphone qsa enhances is pinned before the devices exist: ``PULSE_SOURCE`` (when set)
or the server's default source, which must not be a qsa virtual microphone (qsa would
enhance its own output).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import secrets
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Callable

from qsa.errors import AudioError, ConfigError, QsaError

DEFAULT_NAME = "qsa_mic"
DEFAULT_DESCRIPTION = "qsa denoised microphone"
SINK_SUFFIX = "_sink"
NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,47}\Z")
OWNER_RE = re.compile(r"qsa\.owner=(\d+):(\d+):(\d+)@([A-Za-z0-9_.-]+)")
MIC_RE = re.compile(r"qsa\.virtual_mic=([A-Za-z0-9_.-]+)")
INSTANCE_RE = re.compile(r"qsa\.instance=([0-9a-f]+)")
PACTL_TIMEOUT_S = 5.0
# The sink holds 16-bit samples, not float: the server converts (and clips) what it is given,
# so applications can never read NaN or huge values from the microphone. Seen once under
# heavy load: after a duplex xrun, PortAudio's ALSA -> PulseAudio path played ~160 ms of
# uninitialised memory (values up to 1e34) into a float sink.
SINK_FORMAT = "s16le"

# The watchdog: waits for qsa to close the pipe; unless qsa said "done" first, unloads every
# module tagged with this instance ($1) that is still loaded. On PulseAudio it also keeps the
# sink's clock short meanwhile ($2: the sink, $3: its rate; see VirtualMic._hold): a silent
# playback stream (pacat playing zeros) with a 20 ms latency request, stopped before the
# sink goes (the server would move it to the speakers).
WATCHDOG_SH = """keep=
if [ -n "$2" ] && command -v pacat >/dev/null; then
  pacat --playback -d "$2" --latency-msec=20 --raw --format=s16le --rate="$3" --channels=1 \
    --client-name=qsa-virtual-mic-clock /dev/zero & keep=$!
fi
IFS= read -r line
if [ -n "$keep" ]; then kill "$keep" 2>/dev/null; wait "$keep"; fi
[ "$line" = done ] && exit 0
pactl list short modules 2>/dev/null | grep -F -- "qsa.instance=$1" | cut -f1 |
while read -r i; do pactl unload-module "$i" 2>/dev/null; done
"""


# -- owners ----------------------------------------------------------------------------------
def _start_ticks(pid: int) -> int | None:
    """The process's start time (clock ticks after boot, /proc/PID/stat field 22)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[19])


def _pid_namespace() -> int:
    try:
        return int(re.sub(r"\D", "", os.readlink("/proc/self/ns/pid")) or 0)
    except OSError:
        return 0


@dataclasses.dataclass(frozen=True)
class Owner:
    """The qsa process that loaded a virtual microphone."""

    pid: int
    start: int  # clock ticks after boot: tells a reused pid from the owner
    namespace: int  # pid namespace inode: pids from another container mean nothing here
    host: str

    @classmethod
    def me(cls) -> Owner:
        pid = os.getpid()
        return cls(pid, _start_ticks(pid) or 0, _pid_namespace(), socket.gethostname())

    @classmethod
    def parse(cls, text: str) -> Owner | None:
        m = OWNER_RE.search(text)
        if m is None:
            return None
        return cls(int(m[1]), int(m[2]), int(m[3]), m[4])

    @property
    def local(self) -> bool:
        """Its pid can be checked here (same host, same pid namespace)."""
        return self.host == socket.gethostname() and self.namespace == _pid_namespace()

    @property
    def alive(self) -> bool:
        """True unless the owner is known to be gone (a remote owner counts as alive)."""
        if not self.local:
            return True
        return _start_ticks(self.pid) == self.start

    def __str__(self) -> str:
        return f"{self.pid}:{self.start}:{self.namespace}@{self.host}"


@dataclasses.dataclass(frozen=True)
class MicModule:
    """One loaded module of a qsa virtual microphone (the sink or the source)."""

    index: int
    module: str
    mic: str
    owner: Owner | None
    instance: str | None


# -- pactl -----------------------------------------------------------------------------------
def pactl(*args: str, env: dict | None = None, timeout: float = PACTL_TIMEOUT_S) -> str:
    """Run ``pactl ARGS``; its stdout, or an :class:`AudioError` saying what failed."""
    if shutil.which("pactl") is None:
        raise AudioError(
            "--virtual-mic needs `pactl` (Debian/Ubuntu: apt-get install pulseaudio-utils; "
            "Fedora: dnf install pulseaudio-utils) and a PulseAudio or PipeWire "
            "(pipewire-pulse) server"
        )
    try:
        r = subprocess.run(["pactl", *args], env=env, capture_output=True, text=True,
                           timeout=timeout)  # fmt: skip
    except subprocess.TimeoutExpired:
        raise AudioError(
            f"`pactl {' '.join(args)}` did not answer within {timeout:g} s: the audio server "
            "hangs; restart it (systemctl --user restart pipewire-pulse or pulseaudio)"
        ) from None
    if r.returncode != 0:
        err = (r.stderr or r.stdout).strip()
        if "Connection refused" in err or "Connection failure" in err:
            raise AudioError(
                f"no PulseAudio / PipeWire server answers ({err}); --virtual-mic needs one: "
                "start it (systemctl --user start pipewire-pulse, or pulseaudio --start) or "
                "check PULSE_SERVER"
            )
        raise AudioError(f"`pactl {' '.join(args)}` failed: {err}")
    return r.stdout


def qsa_modules(env: dict | None = None) -> list[MicModule]:
    """Every module on the server that a qsa virtual microphone loaded (tagged ones)."""
    out = []
    for line in pactl("list", "short", "modules", env=env).splitlines():
        parts = line.split("\t")
        if len(parts) < 3 or "qsa.virtual_mic=" not in parts[2]:
            continue
        mic, inst = MIC_RE.search(parts[2]), INSTANCE_RE.search(parts[2])
        out.append(MicModule(int(parts[0]), parts[1], mic[1] if mic else "?",
                             Owner.parse(parts[2]), inst[1] if inst else None))  # fmt: skip
    return out


def remove_stale(env: dict | None = None) -> list[str]:
    """Unload the virtual microphones whose owner process is dead; their names."""
    removed = []
    for m in qsa_modules(env):
        if m.owner is not None and not m.owner.alive:
            with contextlib.suppress(AudioError):  # gone meanwhile (unloading the sink
                pactl("unload-module", str(m.index), env=env)  # removes its source too)
            removed.append(m.mic)
    return sorted(set(removed))


def _short_names(kind: str, env: dict | None) -> list[str]:
    return [ln.split("\t")[1] for ln in pactl("list", "short", kind, env=env).splitlines()
            if ln.count("\t") >= 1]  # fmt: skip


def server_info(env: dict | None = None) -> dict[str, str]:
    """``pactl info`` as a dict ("Server Name", "Default Source", ...)."""
    out = {}
    for line in pactl("info", env=env).splitlines():
        key, sep, value = line.partition(":")
        if sep:
            out[key.strip()] = value.strip()
    return out


def default_source(env: dict | None = None, info: dict | None = None) -> str | None:
    """The server's default source (``pactl info``; works with PulseAudio and PipeWire)."""
    info = server_info(env) if info is None else info
    return info.get("Default Source") or None


def is_pipewire(info: dict) -> bool:
    """The server is pipewire-pulse ("PulseAudio (on PipeWire 1.0.5)"), not PulseAudio."""
    return "pipewire" in info.get("Server Name", "").lower()


def describe_virtual_mics(env: dict | None = None) -> str:
    """The qsa virtual microphones on the audio server, for ``qsa live -l``."""
    try:
        mods = qsa_modules(env)
    except AudioError as e:
        return f"qsa virtual microphones: none (no audio server to ask: {e})"
    mics: dict[str, MicModule] = {}
    for m in mods:
        if m.module == "module-remap-source" or m.mic not in mics:
            mics[m.mic] = m
    if not mics:
        return ("qsa virtual microphones: none (`qsa live --virtual-mic` creates one, "
                f"default name {DEFAULT_NAME!r})")  # fmt: skip
    lines = ["qsa virtual microphones (PulseAudio / PipeWire sources; pick them in the call "
             "application):"]  # fmt: skip
    for name, m in sorted(mics.items()):
        if m.owner is None:
            state = "owner unknown"
        elif m.owner.alive:
            state = f"running, qsa live pid {m.owner.pid}"
        else:
            state = f"stale: qsa pid {m.owner.pid} is gone; the next --virtual-mic removes it"
        lines.append(f"  {name}  (sink {name}{SINK_SUFFIX}, module {m.index}): {state}")
    return "\n".join(lines)


def check_name(name: str) -> str:
    """``name`` if it can name a PulseAudio source, else a :class:`ConfigError`."""
    if not isinstance(name, str) or not NAME_RE.match(name) or name.endswith(".monitor"):
        raise ConfigError(
            f"--virtual-mic {name!r}: not a usable device name; expected 1 to 48 letters, "
            "digits, '_', '.' or '-', starting with a letter or digit, not ending in "
            f"'.monitor' (e.g. --virtual-mic {DEFAULT_NAME}); the name applications show is "
            f"the description, {DEFAULT_DESCRIPTION!r}"
        )
    return name


@contextlib.contextmanager
def _creation_lock():
    """Serialise the check-then-load of qsa instances of this user (two started at once
    would otherwise both find the name free)."""
    import fcntl

    base = os.environ.get("XDG_RUNTIME_DIR") or "/tmp"
    path = os.path.join(base, f"qsa-virtual-mic-{os.getuid()}.lock")
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError:
        yield  # no lock where none can be made: the post-load check still catches a race
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


class VirtualMic:
    """``with VirtualMic("qsa_mic") as vm: ...`` creates the sink and the source (see the
    module docstring), ``vm.environ`` routes a PortAudio ``pulse`` stream into it, ``close``
    removes both (idempotent)."""

    def __init__(
        self,
        name: str = DEFAULT_NAME,
        rate: int = 16000,
        description: str | None = None,
        env: dict | None = None,
        file_mode: bool = False,
    ):
        self.name = check_name(name)
        self.sink = name + SINK_SUFFIX
        self.rate = int(rate)
        self.description = description or (
            DEFAULT_DESCRIPTION if name == DEFAULT_NAME else f"{DEFAULT_DESCRIPTION} ({name})"
        )
        if "'" in self.description or '"' in self.description:
            raise ConfigError(f"virtual microphone description {self.description!r}: quotes "
                              "are not allowed")  # fmt: skip
        self.env = dict(os.environ if env is None else env)
        self.file_mode = file_mode  # the microphone is only recorded: no feedback possible
        self.owner = Owner.me()
        self.instance = secrets.token_hex(8)
        self.modules: list[int] = []
        self.microphone: str | None = None  # the source qsa enhances (PULSE_SOURCE)
        self.removed_stale: list[str] = []
        self._watchdog: subprocess.Popen | None = None
        self._subscribe: subprocess.Popen | None = None
        self._server: dict[str, str] | None = None  # pactl info, once
        self.held = False  # the sink is suspended until its clock stream runs (_hold)
        self._sink_index: str | None = None
        self._closed = False

    # -- creation --------------------------------------------------------------------------
    def create(self) -> VirtualMic:
        env = self.env
        with _creation_lock():
            self.removed_stale = remove_stale(env)
            self._check_free()
            self.microphone = self._pick_microphone()
            tag = (f"qsa.virtual_mic={self.name} qsa.owner={self.owner} "
                   f"qsa.instance={self.instance}")  # fmt: skip
            try:
                self.modules.append(self._load(
                    "module-null-sink", f"sink_name={self.sink}", f"rate={self.rate}",
                    "channels=1", f"format={SINK_FORMAT}",
                    f"sink_properties=\"device.description='{self.description} (qsa writes "
                    f"here)' {tag}\"",
                ))  # fmt: skip
                self._hold()
                self._start_watchdog()  # from here on, any death of qsa removes the modules
                self.modules.append(self._load(
                    "module-remap-source", f"source_name={self.name}",
                    f"master={self.sink}.monitor",
                    f"source_properties=\"device.description='{self.description}' "
                    f"device.icon_name=audio-input-microphone {tag}\"",
                ))  # fmt: skip
                self._check_loaded()
            except BaseException:
                self.close()
                raise
        return self

    def _info(self) -> dict[str, str]:
        if self._server is None:
            self._server = server_info(self.env)
        return self._server

    # -- the sink's clock ------------------------------------------------------------------
    # PulseAudio's module-null-sink takes audio from its streams as far ahead as the lowest
    # latency any of them (or a recorder of its monitor) asks for, and with no such request
    # 2 s ahead (its maximum): a new sink takes a 2 s block of silence at once, and a stream
    # connected later waits until that block has run out before its first sample is taken.
    # That was issue 29's slow start: the first enhanced sample ~2 s after the sink was
    # created, whatever the model, with PortAudio's duplex stream spinning a core meanwhile
    # (capture ready, playback not). The same 2 s stall follows every reconnection of the
    # ALSA plugin's stream (it reconnects after an xrun) while nobody records the virtual
    # microphone. So the sink is suspended as soon as it exists (a resume restarts its
    # clock), the watchdog starts a silent 20 ms playback stream on it for the session (its
    # requests never lapse), and the sink is resumed once that stream is connected
    # (``release``, before qsa's own stream starts).
    # pipewire-pulse's null sink runs on the graph's clock: nothing of this is done there.
    def _hold(self) -> None:
        """Suspend the new sink (PulseAudio only) until :meth:`release`."""
        if is_pipewire(self._info()):
            return
        with contextlib.suppress(AudioError):  # refused: a slower start, nothing worse
            pactl("suspend-sink", self.sink, "1", env=self.env)
            self.held = True

    def release(self, wait_s: float = 1.0) -> None:
        """Resume the sink held since its creation, once the watchdog's clock stream is
        connected to it (waiting at most ``wait_s``): the sink's clock then restarts on that
        stream's 20 ms and a stream qsa connects later has its first sample taken at once.
        Call it before the audio stream starts (a stream started on a suspended sink can
        fail: PortAudio asks its delay, which the ALSA plugin cannot tell yet). Idempotent;
        an :class:`AudioError` when the server refuses (the microphone would stay silent)."""
        if not self.held or self._closed:
            return
        end = time.monotonic() + wait_s
        while not self._clock_connected() and time.monotonic() < end:
            time.sleep(0.01)
        pactl("suspend-sink", self.sink, "0", env=self.env)
        self.held = False

    def _clock_connected(self) -> bool:
        """A stream plays into the sink (the watchdog's pacat: nothing else knows it yet)."""
        if self._sink_index is None:
            sinks = {f[1]: f[0] for f in (ln.split("\t") for ln in
                     pactl("list", "short", "sinks", env=self.env).splitlines()) if len(f) > 1}
            self._sink_index = sinks.get(self.sink)
        idx = self._sink_index
        return idx is not None and any(
            ln.split("\t")[1:2] == [idx]
            for ln in pactl("list", "short", "sink-inputs", env=self.env).splitlines()
        )

    def _load(self, module: str, *args: str) -> int:
        out = pactl("load-module", module, *args, env=self.env).strip()
        try:
            return int(out.split()[-1])
        except (ValueError, IndexError):
            raise AudioError(f"`pactl load-module {module}`: no module index in {out!r}") from None

    def _check_free(self) -> None:
        for m in qsa_modules(self.env):
            if m.mic == self.name:
                who = (f"pid {m.owner.pid}" if m.owner and m.owner.local else
                       f"pid {m.owner.pid} on {m.owner.host}" if m.owner else "an unknown qsa")
                raise AudioError(
                    f"--virtual-mic {self.name}: the name is taken by another `qsa live` "
                    f"({who}, module {m.index}); stop that one, or pick another name, e.g. "
                    f"--virtual-mic {self.name}2"
                )
        taken = set(_short_names("sinks", self.env)) | set(_short_names("sources", self.env))
        for n in (self.name, self.sink, self.sink + ".monitor"):
            if n in taken:
                raise AudioError(
                    f"--virtual-mic {self.name}: the audio server already has a device named "
                    f"{n!r} that is not a qsa virtual microphone; pick another name"
                )

    def _pick_microphone(self) -> str | None:
        """The source to enhance, fixed now: once the virtual source exists the server may
        make it the default (PulseAudio does when it is the only non-monitor source)."""
        mic = self.env.get("PULSE_SOURCE") or default_source(info=self._info())
        if self.file_mode:
            return mic
        if mic is None:  # the virtual source would become the default: qsa would hear itself
            raise AudioError(
                "the audio server has no default source (no microphone) to enhance; connect "
                "one, run with PULSE_SOURCE=<name> (`pactl list short sources`), or play a "
                "file as the microphone with --input-file"
            )
        qsa_mics = {m.mic for m in qsa_modules(self.env)} | {self.name}
        if mic in qsa_mics or mic.removesuffix(".monitor").removesuffix(SINK_SUFFIX) in qsa_mics:
            raise AudioError(
                f"the microphone to enhance would be {mic!r}, a qsa virtual microphone: qsa "
                "would enhance its own output. Pick the real microphone as the default source "
                "(pavucontrol, Input Devices) or run with PULSE_SOURCE=<name> (names: "
                "`pactl list short sources`)"
            )
        return mic

    def _check_loaded(self) -> None:
        sources = _short_names("sources", self.env)
        if self.name not in sources or self.sink + ".monitor" not in sources:
            raise AudioError(
                f"--virtual-mic {self.name}: the server did not create the source under that "
                f"name (sources now: {', '.join(sources)}); another program took it meanwhile: "
                "pick another name"
            )

    def _start_watchdog(self) -> None:
        clock = [self.sink, str(self.rate)] if self.held else []  # PulseAudio: keep-alive
        self._watchdog = subprocess.Popen(
            ["sh", "-c", WATCHDOG_SH, "qsa-virtual-mic-watchdog", self.instance, *clock],
            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            env=self.env, start_new_session=True,  # a Ctrl-C on the terminal spares it
        )  # fmt: skip

    # -- use -------------------------------------------------------------------------------
    @property
    def environ(self) -> dict[str, str]:
        """What routes a PortAudio ``pulse`` stream of this process: out into the sink, in
        from the pinned microphone."""
        env = {"PULSE_SINK": self.sink}
        if self.microphone:
            env["PULSE_SOURCE"] = self.microphone
        return env

    def watch(self, on_lost: Callable[[str], None]) -> None:
        """Call ``on_lost(reason)`` (from a thread) if the sink or the source is removed or
        the audio server goes away while qsa runs. The app calls it once its session is
        open, just before the stream starts: it also resumes the sink held since its
        creation (:meth:`release`)."""
        p = subprocess.Popen(["pactl", "subscribe"], stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, env=self.env, text=True)  # fmt: skip
        self._subscribe = p
        ours = self._device_indices()

        def follow() -> None:
            for line in p.stdout:
                m = re.match(r"Event 'remove' on (sink|source) #(\d+)", line)
                if m and (m[1], int(m[2])) in ours:
                    break
            else:
                if self._closed:
                    return
                on_lost(f"the audio server went away: the virtual microphone {self.name!r} "
                        "is gone with it; start `qsa live --virtual-mic` again once the "
                        "server is back")  # fmt: skip
                return
            if not self._closed:
                on_lost(f"the virtual microphone {self.name!r} was removed from the audio "
                        "server (pactl unload-module or a server restart)")  # fmt: skip

        threading.Thread(target=follow, name="qsa-virtual-mic-watch", daemon=True).start()
        self.release()

    def _device_indices(self) -> set[tuple[str, int]]:
        out = set()
        for kind, names in (("sink", {self.sink}), ("source", {self.name})):
            for ln in pactl("list", "short", kind + "s", env=self.env).splitlines():
                f = ln.split("\t")
                if len(f) > 1 and f[1] in names:
                    out.add((kind, int(f[0])))
        return out

    # -- removal ---------------------------------------------------------------------------
    def close(self) -> None:
        """Remove the sink and the source (idempotent; the stream writing into the sink
        must be closed first). An audio server that is gone took them with it."""
        if self._closed:
            return
        self._closed = True
        if self._subscribe is not None:
            self._subscribe.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._subscribe.wait(timeout=2)
        if self._watchdog is not None:  # first: it stops the sink's clock stream (pacat)
            with contextlib.suppress(OSError, ValueError):
                self._watchdog.stdin.write(b"done\n")
                self._watchdog.stdin.close()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._watchdog.wait(timeout=2)
            # the server drops the dead pacat's stream on its own time: unloading the sink
            # before that would move the stream to another sink
            end = time.monotonic() + 1.0
            with contextlib.suppress(QsaError):
                while self._clock_connected() and time.monotonic() < end:
                    time.sleep(0.01)
        try:
            mine = [m.index for m in qsa_modules(self.env) if m.instance == self.instance]
            # the source first: unloading the sink would take its source along anyway
            for index in sorted(mine, reverse=True):
                with contextlib.suppress(AudioError):
                    pactl("unload-module", str(index), env=self.env)
        except QsaError:
            pass  # no server: nothing of ours is left on it (if qsa dies here, the next
            # start removes what is left: their owner is gone)

    def __enter__(self) -> VirtualMic:
        return self.create() if not self.modules else self

    def __exit__(self, *exc) -> None:
        self.close()


def _portaudio_pulse_device(sd) -> int | None:
    """Index of PortAudio's ALSA ``pulse`` device (the one PULSE_SINK / PULSE_SOURCE route)."""
    for i, d in enumerate(sd.query_devices()):
        if d["name"] == "pulse":
            return i
    return None


def start_for_live(args) -> VirtualMic:
    """``qsa live --virtual-mic``: create the virtual microphone, route this process's
    PortAudio ``pulse`` device into it (out) and from the pinned microphone (in), and point
    ``args``' devices there. The caller closes it after the session."""
    import sys

    if args.output_device is not None:
        raise ConfigError(
            f"--virtual-mic with --output-device {args.output_device!r}: the enhanced stream "
            "goes into the virtual microphone; drop --output-device (or --virtual-mic)"
        )
    vm = VirtualMic(args.virtual_mic, rate=args.samplerate or 16000,
                    file_mode=args.input_file is not None).create()  # fmt: skip
    try:
        os.environ.update(vm.environ)  # read when PortAudio opens the stream
        import sounddevice as sd

        pulse = _portaudio_pulse_device(sd)
        if pulse is None:
            raise AudioError(
                "--virtual-mic plays into the audio server through PortAudio's ALSA 'pulse' "
                "device, which is missing (see `qsa live -l`): install the ALSA PulseAudio "
                "plugin (Debian/Ubuntu: libasound2-plugins, Fedora: alsa-plugins-pulseaudio; "
                "with PipeWire also pipewire-alsa)"
            )
        args.output_device = pulse
        if args.input_device is None and sd.query_devices(pulse)["max_input_channels"] > 0:
            args.input_device = pulse  # the microphone pinned in PULSE_SOURCE
    except BaseException:
        vm.close()
        raise
    stale = f"; removed stale: {', '.join(vm.removed_stale)}" if vm.removed_stale else ""
    print(f"qsa live: virtual microphone {vm.name!r} ({vm.description!r}) created; "
          f"enhancing {vm.microphone or 'the default source'}{stale}", file=sys.stderr)
    return vm
