"""One controller per session: turn taking, barge-in, truncation, next use and the playback board."""
