{
  "payloadType": "application/vnd.in-toto+json",
  "payload": "eyJfdHlwZSI6Imh0dHBzOi8vaW4tdG90by5pby9TdGF0ZW1lbnQvdjEiLCJwcmVkaWNhdGUiOnsia2l0IjoibWFuaWZlc3QifSwicHJlZGljYXRlVHlwZSI6InVybjpraXQ6bWFuaWZlc3QtYXBwcm92YWw6MSIsInN1YmplY3QiOlt7ImRpZ2VzdCI6eyJzaGEyNTYiOiIxYWRhZTI2NzBlNzE5ZmYxOWViYTdhYzg3MDRmNzA5NTg2NGZhYjQ1ZmQzYzc4OTUwNjJlY2ExMjFjZDJjYmUxIn0sIm5hbWUiOiJoMjAwLXNlcXN0b3AueWFtbCJ9XX0=",
  "signatures": [
    {
      "keyid": "SHA256:+7JblY1FdA9i3H5v5xHFp5RlvuS2IFBmP4Kwmrl738s",
      "sig": "xtjLUQ5zOqmDdHTFsVlCXEbE4WSNAsUGaFt4l7DWUpPbhdjvPeykEnx2yu/4CnRsUnARSQszjH1FlR0VhSjUAw==",
      "publicKey": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIE3lKu2Eaqir5Wi+R44pDwEuDfFJHlGGFKEXqIYwyP52 kit-example"
    }
  ]
}
