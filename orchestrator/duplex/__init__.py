"""Full-duplex streams: every session's audio into its thinker request, frame by frame, on one clock."""
