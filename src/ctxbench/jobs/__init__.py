"""A job folder and what it holds: its manifest, the file names and the job model the reports read (``results``),
the run-output settings (``run_outputs``)."""
