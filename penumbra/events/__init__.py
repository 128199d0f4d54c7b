"""Events and stream parameters, and their JSON codec (DESIGN.md, "Public contracts").

:mod:`.streams` holds the stream parameters and gap densities, :mod:`.model` the event and
the checks that make one, :mod:`.codec` the reading of JSON text (lines, blocks, files), and
:mod:`.validation` the checks the first two share; :mod:`.columns` a block of events as
columns (what the pipeline routes without making an event object).

>>> streams = parse_streams({"seismic": {"templates": {"s1": {"edges": [0, 20, 30, 40],
...                                                    "probs": [0.1, 0.3, 0.6]}}}})
>>> e = parse_event({"stream": "seismic", "id": "a1", "ts": {"detected": 60, "template": "s1"}},
...                 streams)
>>> e.histogram.edges.tolist(), e.template
([20.0, 40.0, 50.0, 60.0], 's1')
"""

from .codec import (
    Admitted, Rejected, admit_contents, admit_events, collector_paused, content_of, load_events, load_streams, loads,
    loads_events, parse_event_line, parse_event_lines, parse_events, read_events,
)
from .columns import EventColumns, events_from_bytes
from .model import MAX_ATTRS, Event, event_to_json, parse_event
from .streams import GAP_FAMILIES, StreamParams, Streams, gap_problem, parse_streams

__all__ = [
    "Admitted", "Event", "EventColumns", "GAP_FAMILIES", "MAX_ATTRS", "Rejected", "StreamParams", "Streams",
    "admit_contents", "admit_events", "collector_paused", "content_of", "event_to_json", "events_from_bytes",
    "gap_problem", "load_events", "load_streams", "loads", "loads_events", "parse_event", "parse_event_line",
    "parse_event_lines", "parse_events", "parse_streams", "read_events",
]
