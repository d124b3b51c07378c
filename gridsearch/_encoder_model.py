"""The file MLflow runs to build a registered sentence encoder ("models from code": the
model is this code, not a pickle). ``gridsearch._served.log_encoder`` copies it into
every model it logs; loading the model runs it, with the model's bundled code first on
``sys.path``. Not for importing otherwise."""

from mlflow.models import set_model

from gridsearch._served import SentenceEncoderModel

set_model(SentenceEncoderModel())
