throw new Error('msgpackr-extract is not installed: msgpackr uses its JavaScript implementation');
