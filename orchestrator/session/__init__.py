"""A session's conversation in the pipeline: its thinker context, user inputs, turns and transcripts."""
