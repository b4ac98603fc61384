"""Plain data and pure rules shared by every front end: no textual or rich imports."""
