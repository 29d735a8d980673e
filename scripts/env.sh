# Environment for ctxemb commands: shared data and nltk's WordNet beside the checkout, unless already set.
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [ -z "${CTXEMB_DATA:-}" ] && [ -d "$here/../shared/data" ]; then export CTXEMB_DATA="$here/../shared/data"; fi
if [ -z "${NLTK_DATA:-}" ] && [ -n "${CTXEMB_DATA:-}" ]; then export NLTK_DATA="$CTXEMB_DATA/nltk_data"; fi
export TOKENIZERS_PARALLELISM=false
