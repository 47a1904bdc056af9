"""The data path between stages: the stage bus, request ids, the stage graph, chunk streams, reply hops."""
