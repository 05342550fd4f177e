"""Board profiles: what each board can afford (see README.md in this folder)."""
