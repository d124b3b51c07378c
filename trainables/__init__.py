"""The caption and image encoders, the losses, the training loop and the evaluation
suite. Library code: no Ray or MLflow imports here, except in the Tune
trainable wrapper."""
