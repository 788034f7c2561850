"""The admin service on NATS and its client: what operators, the CLI and the console use."""
