"""The job engine: units of work and the executors that run them, the journal and plan of a
resumable run, the run driver, spill frames, the commit of an output directory, and the hashing
writer every data file goes through."""
