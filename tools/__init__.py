"""The command line (`hutch serve`, `hutch passwd`) and developer tools."""
