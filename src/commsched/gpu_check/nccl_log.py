"""Reading NCCL's own debug log (``NCCL_DEBUG=INFO``, ``NCCL_DEBUG_SUBSYS=INIT,ENV,TUNING``): whether the
tuner plugin was loaded, and the channels each all-reduce ran with. Plain text, no torch.

Every pattern is the format string of the NCCL source line it matches (NCCL 2.30.7 unless said;
``src/debug.cc`` prefixes each INFO line with ``host:pid:tid [cudaDev] NCCL INFO ``, so the
patterns search inside a line rather than anchor at its start):

- plugin loaded: ``"Successfully loaded external tuner plugin %s"`` (src/plugin/tuner.cc:90; the
  same text since 2.28) and ``"TUNER/Plugin: Using %s (v6)"`` (src/plugin/tuner/tuner_v6.cc:17; v2..v5
  alike; NCCL 2.26/2.27 wrote ``"TUNER/Plugin: Using tuner plugin %s"``, tuner_v4.cc:17);
- plugin not loaded: ``"External tuner plugin %s is unsupported"`` (tuner.cc:87),
  ``"%s/Plugin: Could not find:%s%s%s"`` (src/plugin/plugin_open.cc:124);
- the plugin's own line, sent through NCCL's logger by ``commsched_tuner.c``:
  ``"commsched NCCL tuner: %zu size ranges from %s"``;
- channels per collective: ``"%s: %ld Bytes -> Algo %s proto %s channel{Lo..Hi}={%d..%d}"``
  (src/enqueue.cc:822, written by rank 0 only, once per collective as it is scheduled; the same
  text since 2.26), so the channels are ``Hi - Lo + 1``;
- channels per communicator: ``"%d coll channels, %d collnet channels, %d nvls channels, %d p2p
  channels, %d p2p channels per peer"`` (src/init.cc:1646).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["CollLine", "PluginState", "coll_lines", "comm_channels", "excerpt", "plugin_state"]

_LOADED = re.compile(r"Successfully loaded external tuner plugin (\S+)")
# NCCL 2.26 also writes "TUNER/Plugin: Using internal tuner plugin." (plugin_open.cc:104) when it loaded none
_USING = re.compile(r"TUNER/Plugin: Using (?!internal tuner plugin)(?:tuner plugin )?(\S+)(?: \(v(\d+)\))?")
_UNSUPPORTED = re.compile(r"External tuner plugin (\S+) is unsupported")
_NOT_FOUND = re.compile(r"TUNER/Plugin: Could not find:(.*)")
_OWN = re.compile(r"commsched NCCL tuner: (\d+) size ranges from (\S+)")
_COLL = re.compile(
    r"NCCL INFO (\w+): (\d+) Bytes -> Algo (\S+) proto (\S+) channel\{Lo\.\.Hi\}=\{(\d+)\.\.(\d+)\}"
)
_COMM = re.compile(r"NCCL INFO (\d+) coll channels, (\d+) collnet channels, (\d+) nvls channels")
# lines worth keeping in the excerpt the check writes out
_KEEP = re.compile(
    r"NCCL version|TUNER|[Tt]uner plugin|commsched NCCL tuner|Bytes -> Algo|coll channels|Init COMPLETE|"
    r"NCCL WARN|MULTI_RANK|NCCL_TUNER_PLUGIN|NCCL_MIN_NCHANNELS|NCCL_NTHREADS|CTAs"
)


@dataclass(frozen=True)
class PluginState:
    """What NCCL's log says of the tuner plugin: ``loaded`` when NCCL said it uses it (its name),
    ``ranges`` the plugin's own count of table ranges (None when it did not log), ``lines`` the
    lines that said so, ``problems`` NCCL's lines saying it could not load one."""

    loaded: bool
    name: str
    abi_version: int | None
    ranges: int | None
    lines: tuple[str, ...]
    problems: tuple[str, ...]


@dataclass(frozen=True)
class CollLine:
    """One ``channel{Lo..Hi}`` tuning line: the collective, its bytes, algorithm, protocol, channels."""

    func: str
    bytes: int
    algorithm: str
    protocol: str
    channel_lo: int
    channel_hi: int

    @property
    def channels(self) -> int:
        return self.channel_hi - self.channel_lo + 1


def plugin_state(text: str) -> PluginState:
    """Whether NCCL loaded a tuner plugin, read from its INIT/TUNING log ``text``."""
    name, version, ranges, lines, problems = "", None, None, [], []
    for line in text.splitlines():
        m = _USING.search(line)
        if m:
            name = m.group(1)
            version = int(m.group(2)) if m.group(2) else version
            lines.append(line.strip())
            continue
        m = _LOADED.search(line)
        if m:
            name = name or m.group(1)
            lines.append(line.strip())
            continue
        m = _OWN.search(line)
        if m:
            ranges = int(m.group(1))
            lines.append(line.strip())
            continue
        if _UNSUPPORTED.search(line) or _NOT_FOUND.search(line):
            problems.append(line.strip())
    loaded = any(_USING.search(x) or _LOADED.search(x) for x in lines)
    return PluginState(loaded, name, version, ranges, tuple(lines), tuple(problems))


def coll_lines(text: str, func: str = "AllReduce") -> tuple[CollLine, ...]:
    """The tuning lines of collective ``func`` in log order."""
    out = []
    for line in text.splitlines():
        m = _COLL.search(line)
        if m and m.group(1) == func:
            out.append(CollLine(m.group(1), int(m.group(2)), m.group(3), m.group(4), int(m.group(5)), int(m.group(6))))
    return tuple(out)


def comm_channels(text: str) -> tuple[int, ...]:
    """Each communicator's collective channels, in the order the log reports them (every rank logs its own)."""
    return tuple(int(m.group(1)) for m in map(_COMM.search, text.splitlines()) if m)


def excerpt(text: str, max_lines: int = 400) -> str:
    """The lines that matter to the check (versions, plugin, channels, warnings), at most ``max_lines``
    (the first half and the last half when there are more, with a line saying how many were left out)."""
    kept = [line.rstrip() for line in text.splitlines() if _KEEP.search(line)]
    if len(kept) > max_lines:
        half = max_lines // 2
        kept = kept[:half] + [f"... {len(kept) - 2 * half} lines left out ..."] + kept[-half:]
    return "\n".join(kept) + ("\n" if kept else "")
