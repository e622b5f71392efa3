"""The floor under everything, with no Prefect in it: stable digests, secrets kept out of
every log, whether a process lives, and the processes a run launched."""
