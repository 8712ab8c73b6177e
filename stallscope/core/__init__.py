"""The ground floor: the error tree, the frame schemas, the thresholds. Imports nothing of ours."""
