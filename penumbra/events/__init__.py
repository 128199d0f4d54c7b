"""Events and stream parameters, and their JSON codec (DESIGN.md, "Public contracts").

:mod:`.streams` holds the stream parameters and gap densities, :mod:`.model` the event and
the checks that make one, :mod:`.codec` the reading of JSON text (lines, blocks, files), and
:mod:`.validation` the checks the first two share.

>>> streams = parse_streams({"seismic": {"templates": {"s1": {"edges": [0, 20, 30, 40],
...                                                    "probs": [0.1, 0.3, 0.6]}}}})
>>> e = parse_event({"stream": "seismic", "id": "a1", "ts": {"detected": 60, "template": "s1"}},
...                 streams)
>>> e.histogram.edges.tolist(), e.template
([20.0, 40.0, 50.0, 60.0], 's1')
"""

# the service imports ``loads`` and ``loads_events`` and the tests ``MAX_ATTRS`` from here; as before, none is in __all__
from .codec import (
    Admitted, Rejected, admit_contents, admit_events, collector_paused, content_of, load_events, load_streams, loads,
    loads_events, parse_event_line, parse_event_lines, parse_events, read_events,
)
from .model import MAX_ATTRS, Event, event_to_json, parse_event
from .streams import GAP_FAMILIES, StreamParams, Streams, gap_problem, parse_streams

__all__ = [
    "Admitted", "Event", "GAP_FAMILIES", "Rejected", "StreamParams", "Streams", "admit_contents", "admit_events",
    "collector_paused", "content_of",
    "event_to_json",
    "gap_problem", "load_events", "load_streams", "parse_event", "parse_event_line", "parse_event_lines",
    "parse_events", "parse_streams", "read_events",
]
