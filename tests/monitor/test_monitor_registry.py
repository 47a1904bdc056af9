import pytest

from monitor import MonitorRegistry, SessionMonitor, TurnDetector


def test_registry_maps_sessions_to_snapshots(scripted_vad, clock):
    registry = MonitorRegistry()
    for sid in ("a", "b"):
        registry.add(SessionMonitor(sid, TurnDetector(scripted_vad([])), clock))
    registry.get("a").playback.start_item("r1")
    registry.get("a").playback.delivered(1000)
    clock.t = 0.25
    assert registry.snapshot("a").playback_buffer_ms == pytest.approx(750)
    snaps = registry.snapshots(now=0.5)
    assert sorted(snaps) == ["a", "b"]
    assert snaps["a"].playback_buffer_ms == pytest.approx(500) and snaps["b"].playback_buffer_ms == 0
    with pytest.raises(ValueError, match="already monitored"):
        registry.add(SessionMonitor("a", TurnDetector(scripted_vad([])), clock))
    registry.remove("a")
    assert "a" not in registry and len(registry) == 1
