"""The OpenAI Realtime-compatible WebSocket API."""
