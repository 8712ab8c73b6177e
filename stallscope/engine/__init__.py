"""The serving engine without a model: requests, the V1 scheduler, the paged KV cache manager, StepStats and the step trace."""
