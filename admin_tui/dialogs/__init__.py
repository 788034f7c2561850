"""Modal dialogs of the console, one per module."""
