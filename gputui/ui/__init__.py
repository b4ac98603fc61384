"""The terminal UI (Textual): the App, its screens and widgets."""
