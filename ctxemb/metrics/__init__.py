"""Pure metric functions: no models, arrays and label lists in, numbers out."""
