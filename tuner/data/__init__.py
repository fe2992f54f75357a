"""Images for trials: the built-in data sets, a user's own (image folders, Parquet),
decoding, splits, Ray Data streaming and augmentation."""
