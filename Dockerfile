# One image for every cronchain process; docker-compose.yml picks the command.
FROM python:3.11-slim
WORKDIR /app
# The dependencies in a layer of their own, rebuilt only when pyproject.toml changes.
COPY pyproject.toml ./
RUN python -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']))" > /tmp/requirements.txt \
    && pip install --no-cache-dir -r /tmp/requirements.txt
COPY . .
RUN pip install --no-cache-dir --no-deps .
# Not root: Celery warns against it, and nothing here needs it.
RUN useradd --system --uid 10001 --home-dir /var/lib/cronchain --create-home cronchain
USER cronchain
ENV CRONCHAIN_HOME=/var/lib/cronchain
CMD ["celery", "-A", "cronchain.tasks", "worker", "--loglevel", "INFO"]
