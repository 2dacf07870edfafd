"""Time units, defined once. Traces count picoseconds (XPlane's `offset_ps`,
`duration_ps`); the step clock counts nanoseconds; the JSON documents speak milliseconds
and seconds.

Each constant keeps the type the code has always divided by: the float ones turn an
integer count into a float exactly as a literal `1e9` did, and the integer ones keep
integer arithmetic exact (`ns * PS_PER_NS`, `ns / NS_PER_S` on Python ints).
"""

from __future__ import annotations

PS_PER_NS = 1_000
PS_PER_US = 1e6
PS_PER_MS = 1e9
PS_PER_S = 1e12
NS_PER_MS = 1e6
NS_PER_S = 1_000_000_000
