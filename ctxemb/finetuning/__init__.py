"""Fine-tuning recipes: readers, features, tasks, prediction."""
