"""Record-batch in, record-batch out."""
