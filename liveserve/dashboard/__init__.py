"""The live dashboard: GET /dashboard, a page that polls /dashboard/feed, a JSON view of the server's state."""
