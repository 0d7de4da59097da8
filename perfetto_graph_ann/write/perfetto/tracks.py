"""Track layout of a written trace (docs/design.md, Contract 4).

* GPU: one global root track per device, ``GPU <n>`` (description: the device name), with
  one child per lane ordered by lane id (EXPLICIT ordering); lanes are named from
  ``LaneLayout.lane_names``, else the trace's own ``thread_name`` for that GPU pid / tid
  when it is not Kineto's default ``stream N`` (so our annotated Chrome JSON's ``61 mlp``
  survives a conversion back, as in Perfetto's JSON importer), else ``stream <id>``.
  Spill tracks of a lane repeat its name and rank, and all of them merge by the sibling merge
  key ``graph_ann.lane:<device>:<lane>`` (:func:`lane_merge_key`), which the SQL package reads
  as the device and lane of every GPU work slice on them (the plan writes those as each
  slice's ``device`` / ``stream`` args).
* CPU: a process track per pid (Kineto's ``process_name`` / ``process_labels`` /
  ``process_sort_index``) and a thread track per (pid, tid) (``thread_name``,
  ``thread_sort_index``); spill tracks of a thread, and threads whose tid does not fit in
  32 bits, are children of the process track named like the thread.
* GPU projection (the join's ``ranges``): under ``GPU <n>`` a ``graph replays`` track (rank
  first) and a ``scopes`` track (second) where a scope slice nests in its enclosing scope;
  ranges that overlap otherwise (parallel branches, concurrent replays) spill onto more
  tracks named ``scopes`` / ``graph replays``, which the UI shows as one group, as lanes do.
* Anything else (string pids such as Kineto's "Spans" / "Traces", negative pids such as the
  overhead events' -1): Kineto's bookkeeping, one ``torch.profiler`` root track holding a
  track per pid with a child per tid; created only when something is written there.
* Counters: a counter track per (pid, counter name, arg key) under the pid's track.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Dict, List, Optional, Set, Tuple

from ...read.model import KinetoTrace, TraceEvent
from .descriptors import (CHILD_ORDERING_EXPLICIT, SIBLING_MERGE_BY_KEY, ProcessDescriptor, ThreadDescriptor,
                          TrackDescriptor)

__all__ = ["group_merge_key", "GROUP_MERGE_KEY_PREFIX", "Home", "lane_merge_key", "LANE_MERGE_KEY_PREFIX",
           "PROFILER_GROUP", "REPLAYS_TRACK", "SCOPES_TRACK", "Track", "TrackTable"]

_INT32_MIN, _INT32_MAX = -(1 << 31), (1 << 31) - 1
#: names of the projection's tracks under each ``GPU N`` and of the bookkeeping group
REPLAYS_TRACK = "graph replays"
SCOPES_TRACK = "scopes"
PROFILER_GROUP = "torch.profiler"

Home = Tuple[Any, ...]


#: prefix of a lane track's sibling merge key (``graph_ann.lane:<device>:<lane>``, read by
#: ``sql/graph_ann/work_args.sql``): its spill tracks merge by it, and it tells SQL the device
#: and lane that every GPU work slice on the track carries as its ``device`` / ``stream`` args
LANE_MERGE_KEY_PREFIX = "graph_ann.lane:"


#: prefix of the sibling merge key of a merged trace's group root track
#: (``graph_ann.group:<group>:<rank>[:<label>]``, read by ``sql/graph_ann/groups.sql``)
GROUP_MERGE_KEY_PREFIX = "graph_ann.group:"


def lane_merge_key(device: Any, lane: Any, group: Optional[int] = None) -> str:
    """The sibling merge key of a lane's tracks: ``graph_ann.lane:<device>:<lane>``, or in a
    merged trace ``graph_ann.lane:<group>:<device>:<lane>`` (the UI then never merges the
    lanes of two inputs, and SQL reads the group from it)."""
    if group is None:
        return f"{LANE_MERGE_KEY_PREFIX}{device}:{lane}"
    return f"{LANE_MERGE_KEY_PREFIX}{group}:{device}:{lane}"


def group_merge_key(group: int, rank: int, label: Optional[str] = None) -> str:
    """The sibling merge key of a merged trace's group root (``Rank <r>``): its position in
    the merge, its rank and its label, for SQL (``graph_ann_group``)."""
    return f"{GROUP_MERGE_KEY_PREFIX}{group}:{rank}" + (f":{label}" if label is not None else "")


def _is_int(v: Any) -> bool:
    return type(v) is int


def _is_default_lane_name(name: str) -> bool:
    """Kineto's own GPU thread names (``"stream 7 "``), empty ones, and ours (``stream 7``)."""
    words = name.split()
    return not words or words[0] == "stream"


def _clamp32(v: int) -> int:
    return max(_INT32_MIN, min(_INT32_MAX, v))


@dataclasses.dataclass
class Track:
    uuid: int
    descriptor: TrackDescriptor


class TrackTable:
    """Creates tracks on first use and remembers their descriptors, in creation order."""

    def __init__(self, trace: KinetoTrace, lane_names: Optional[Dict[Tuple[int, int], str]] = None) -> None:
        self._lane_names = lane_names or {}
        self._next_uuid = 1
        self._tracks: Dict[Tuple, int] = {}
        self.descriptors: List[TrackDescriptor] = []
        self.process_name: Dict[Any, str] = {}
        self.process_labels: Dict[Any, str] = {}
        self.process_sort: Dict[Any, int] = {}
        self.thread_name: Dict[Tuple[Any, Any], str] = {}
        self.thread_sort: Dict[Tuple[Any, Any], int] = {}
        self.device_names: Dict[int, str] = {}
        #: pids holding GPU work (set by the writer): their ``thread_name`` metadata names lanes
        self.gpu_pids: Set[Any] = set()
        for p in trace.device_properties:
            if isinstance(p, dict) and _is_int(p.get("id")) and isinstance(p.get("name"), str):
                self.device_names[p["id"]] = p["name"]
        self.spill_tracks = 0

    # -- metadata ------------------------------------------------------------------------
    def consume_metadata(self, e: TraceEvent) -> bool:
        """Take a known ``M`` event (process/thread name, labels, sort index); False if unknown."""
        a = e.args
        n = e.name
        if n == "process_name" and isinstance(a.get("name"), str):
            self.process_name[e.pid] = a["name"]
        elif n == "process_labels" and isinstance(a.get("labels"), str):
            self.process_labels[e.pid] = a["labels"]
        elif n == "process_sort_index" and _is_int(a.get("sort_index")):
            self.process_sort[e.pid] = a["sort_index"]
        elif n == "thread_name" and isinstance(a.get("name"), str):
            self.thread_name[(e.pid, e.tid)] = a["name"]
        elif n == "thread_sort_index" and _is_int(a.get("sort_index")):
            self.thread_sort[(e.pid, e.tid)] = a["sort_index"]
        else:
            return False
        return True

    # -- homes -----------------------------------------------------------------------------
    @staticmethod
    def cpu_home(pid: Any, tid: Any) -> Home:
        """Thread track when pid and tid fit Perfetto's 32-bit ids; a tid beyond that (64-bit
        pthread ids) gets a named track in its process, since the trace processor would
        truncate it and could merge two threads."""
        if _is_int(pid) and 0 <= pid <= _INT32_MAX and _is_int(tid):
            return ("thread", pid, tid) if 0 <= tid <= _INT32_MAX else ("wide_thread", pid, tid)
        return ("named", pid, tid)

    def track(self, home: Home, spill: int = 0) -> int:
        """uuid of track ``spill`` (0 = the home's own track) of ``home``, created on first use."""
        key = (home, spill)
        u = self._tracks.get(key)
        if u is None:
            u = self._tracks[key] = self._create(home, spill)
        return u

    def counter_track(self, pid: Any, tid: Any, name: str, gpu_device: Optional[int]) -> int:
        key = ("counter", pid, name, gpu_device)
        u = self._tracks.get(key)
        if u is None:
            if gpu_device is not None:
                parent = self._gpu_root(gpu_device)
            else:
                home = self.cpu_home(pid, tid)
                parent = self._process(pid) if home[0] != "named" else self._named_root(pid)
            d = TrackDescriptor(uuid=self._uuid(), parent_uuid=parent, name=name, counter=True)
            u = self._tracks[key] = self._add(d)
        return u

    # -- creation --------------------------------------------------------------------------
    def _uuid(self) -> int:
        u = self._next_uuid
        self._next_uuid += 1
        return u

    def max_uuid(self) -> int:
        """The largest uuid handed out so far (uuids are 1, 2, ...: small, dense varints)."""
        return self._next_uuid - 1

    def _add(self, d: TrackDescriptor) -> int:
        self.descriptors.append(d)
        return d.uuid

    def _gpu_root(self, device: int) -> int:
        key = ("gpu_root", device)
        u = self._tracks.get(key)
        if u is None:
            d = TrackDescriptor(uuid=self._uuid(), name=f"GPU {device}", child_ordering=CHILD_ORDERING_EXPLICIT)
            desc = self.device_names.get(device)
            if desc:
                d.description = desc
            u = self._tracks[key] = self._add(d)
        return u

    def _profiler_root(self) -> int:
        """The one group holding Kineto's bookkeeping (profiler span, overhead, ``Spans``...)."""
        key = ("profiler_root",)
        u = self._tracks.get(key)
        if u is None:
            d = TrackDescriptor(uuid=self._uuid(), name=PROFILER_GROUP,
                                description="torch.profiler's own bookkeeping: the profiler span, "
                                            "activity-buffer overhead and other events without a process")
            u = self._tracks[key] = self._add(d)
        return u

    def _process(self, pid: int) -> int:
        key = ("process", pid)
        u = self._tracks.get(key)
        if u is None:
            p = ProcessDescriptor(pid=pid, process_name=self.process_name.get(pid))
            if pid in self.process_sort:
                p.legacy_sort_index = _clamp32(self.process_sort[pid])
            if pid in self.process_labels:
                p.process_labels.append(self.process_labels[pid])
            d = TrackDescriptor(uuid=self._uuid(), process=p)
            u = self._tracks[key] = self._add(d)
        return u

    def _named_root(self, pid: Any) -> int:
        key = ("named_root", pid)
        u = self._tracks.get(key)
        if u is None:
            name = self.process_name.get(pid) or (str(pid) if pid != "" else "(no pid)")
            d = TrackDescriptor(uuid=self._uuid(), name=name, parent_uuid=self._profiler_root())
            u = self._tracks[key] = self._add(d)
        return u

    def lane_name(self, device: int, lane: int) -> str:
        """The join's name, else the trace's own non-default thread name, else ``stream <lane>``."""
        name = self._lane_names.get((device, lane))
        if name:
            return name
        if device in self.gpu_pids:
            name = self.thread_name.get((device, lane))
            if name is not None and not _is_default_lane_name(name):
                return name
        return f"stream {lane}"

    def _create(self, home: Home, spill: int) -> int:
        kind = home[0]
        if spill:
            self.spill_tracks += 1
        if kind == "replays":
            d = TrackDescriptor(uuid=self._uuid(), parent_uuid=self._gpu_root(home[1]), name=REPLAYS_TRACK,
                                sibling_order_rank=_INT32_MIN)
            return self._add(d)
        if kind == "scope":
            d = TrackDescriptor(uuid=self._uuid(), parent_uuid=self._gpu_root(home[1]), name=SCOPES_TRACK,
                                sibling_order_rank=_INT32_MIN + 1)
            return self._add(d)
        if kind == "gpu":
            _, device, lane = home
            d = TrackDescriptor(uuid=self._uuid(), parent_uuid=self._gpu_root(device),
                                name=self.lane_name(device, lane), sibling_order_rank=_clamp32(lane),
                                sibling_merge_behavior=SIBLING_MERGE_BY_KEY,
                                sibling_merge_key=lane_merge_key(device, lane))
            return self._add(d)
        if kind == "thread" or kind == "wide_thread":
            _, pid, tid = home
            parent = self._process(pid)
            name = self.thread_name.get((pid, tid))
            if spill or kind == "wide_thread":
                d = TrackDescriptor(uuid=self._uuid(), parent_uuid=parent, name=name or f"thread {tid}")
                return self._add(d)
            t = ThreadDescriptor(pid=pid, tid=tid, thread_name=name)
            if (pid, tid) in self.thread_sort:
                t.legacy_sort_index = _clamp32(self.thread_sort[(pid, tid)])
            return self._add(TrackDescriptor(uuid=self._uuid(), thread=t))
        _, pid, tid = home
        parent = self._named_root(pid)
        name = self.thread_name.get((pid, tid)) or (str(tid) if tid != "" else "(no tid)")
        d = TrackDescriptor(uuid=self._uuid(), parent_uuid=parent, name=name)
        if (pid, tid) in self.thread_sort:
            d.sibling_order_rank = _clamp32(self.thread_sort[(pid, tid)])
        return self._add(d)
