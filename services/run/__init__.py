"""One run's life: launch, run id and directory, storage root, the embedded Ray."""
